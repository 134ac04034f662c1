#!/usr/bin/env python3
"""Follow jobstage's event stream and show the progress of jobs.

    python3 examples/events/follow.py [--server URL] [--count N] [TYPE ...]

Reads GET /v1/events (server-sent events) with the standard library alone,
prints a line per change of a job, with how many of the jobs it has seen
are pending, running and finished, and reconnects after the stream ends
with the last cursor it read (the Last-Event-ID header), so that it misses
nothing. A "reset" event means the events before it may have been lost:
it starts its tally again from the server's counts (GET /v1/types).
The token, if the server needs one, comes from $JOBSTAGE_TOKEN.
"""

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request


def shown(s):
    """s with control and bidi characters escaped, so that a job's id or
    an error cannot drive the terminal."""
    out = []
    for ch in str(s):
        o = ord(ch)
        if o < 0x20 or 0x7F <= o < 0xA0 or 0x202A <= o <= 0x202E or 0x2066 <= o <= 0x2069:
            out.append("\\x%02x" % o if o < 0x100 else "\\u%04x" % o)
        else:
            out.append(ch)
    return "".join(out)


def request(url, token, headers=None):
    req = urllib.request.Request(url, headers=headers or {})
    if token:
        req.add_header("Authorization", "Bearer " + token)
    return urllib.request.urlopen(req, timeout=60)


def events(server, token, types, cursor):
    """Yields (event, data) from one connection to the stream."""
    query = urllib.parse.urlencode([("type", t) for t in types])
    headers = {"Accept": "text/event-stream"}
    if cursor:
        headers["Last-Event-ID"] = cursor
    with request(server + "/v1/events" + ("?" + query if query else ""), token, headers) as resp:
        name, data = "", ""
        for raw in resp:
            line = raw.decode("utf-8").rstrip("\r\n")
            if line == "":
                if data:
                    yield name or "message", json.loads(data)
                name, data = "", ""
            elif line.startswith(":"):
                continue  # keepalive
            else:
                field, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if field == "event":
                    name = value
                elif field == "data":
                    data = value


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", default=os.environ.get("JOBSTAGE_SERVER", "http://127.0.0.1:8080"))
    p.add_argument("--count", type=int, default=0, help="stop after this many job events (0: never)")
    p.add_argument("types", nargs="*", help="types to follow (none: every type)")
    args = p.parse_args()
    token = os.environ.get("JOBSTAGE_TOKEN", "")

    state = {}  # (type, id) -> state, of the jobs seen since the last reset
    cursor, seen, pause = "", 0, 1
    while True:
        try:
            for name, ev in events(args.server.rstrip("/"), token, args.types, cursor):
                pause = 1
                # Every event with a cursor (ready too) is where a
                # reconnection goes on from; an error event has none.
                cursor = ev.get("cursor") or cursor
                if name == "ready":
                    print("following from", ev["cursor"], flush=True)
                    continue
                if name == "reset":
                    print("reset:", shown(ev.get("reason", "")), flush=True)
                    state.clear()
                    continue
                if name == "error":
                    print("the server ended the stream:", shown(ev.get("error")), file=sys.stderr, flush=True)
                    break
                if ev["state"] == "removed":
                    state.pop((ev["type"], ev["id"]), None)
                else:
                    state[(ev["type"], ev["id"])] = ev["state"]
                tally = {s: 0 for s in ("pending", "running", "finished")}
                for s in state.values():
                    tally[s] = tally.get(s, 0) + 1
                outcome = " (%s)" % shown(ev["outcome"]) if ev.get("outcome") else ""
                print("%s %s %s%s attempt %d  [%d pending, %d running, %d finished]" % (
                    shown(ev["type"]), shown(ev["id"]), shown(ev["state"]), outcome, ev.get("attempts", 0),
                    tally["pending"], tally["running"], tally["finished"]), flush=True)
                seen += 1
                if args.count and seen >= args.count:
                    return 0
        except urllib.error.HTTPError as e:
            body = e.read().decode("utf-8", "replace")
            print("refused: %d %s" % (e.code, shown(body)), file=sys.stderr, flush=True)
            if e.code != 503:
                return 1
        except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
            print("stream ended:", e, file=sys.stderr, flush=True)
        except KeyboardInterrupt:
            return 0
        time.sleep(pause)  # then reconnect with the last cursor
        pause = min(pause * 2, 30)


if __name__ == "__main__":
    sys.exit(main())
