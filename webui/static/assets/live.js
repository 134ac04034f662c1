// Live follows GET /v1/events, the server-sent event stream of job
// changes, for some types (none: all). The browser's EventSource sends
// the session cookie, and on a reconnect the last event's id
// (Last-Event-ID), so the server resumes where the stream stopped; when
// it cannot, it sends a reset and the page reloads what it shows.
//
// Events: "job" with {type, id, state, outcome, attempts, at} and
// "reset" with {reason}; comment lines keep the connection open.
import { paths } from './api.js';

export class Live {
  constructor({ onStatus, onEvent, onReset }) {
    this.onStatus = onStatus;
    this.onEvent = onEvent;
    this.onReset = onReset;
    this.es = null;
    this.key = null;
    this.disabled = false;
  }

  // follow makes the stream carry the changes of types (all when empty).
  follow(types) {
    if (this.disabled) return;
    const key = [...types].sort().join('\n');
    if (this.es && this.key === key && this.es.readyState !== EventSource.CLOSED) return;
    this.close();
    this.key = key;
    const es = new EventSource(paths.events(types));
    this.es = es;
    this.onStatus('connecting');
    es.addEventListener('open', () => {
      if (this.es === es) this.onStatus('on');
    });
    es.addEventListener('error', () => {
      if (this.es !== es) return;
      // CLOSED: the server refused the stream (no such route, a role
      // that may not read it); the browser does not try again.
      // CONNECTING: the connection dropped; the browser reconnects
      // with the last event's id.
      this.onStatus(es.readyState === EventSource.CLOSED ? 'unavailable' : 'reconnecting');
    });
    es.addEventListener('job', (m) => {
      if (this.es !== es) return;
      let ev;
      try {
        ev = JSON.parse(m.data);
      } catch {
        return;
      }
      this.onEvent(ev);
    });
    es.addEventListener('reset', () => {
      if (this.es === es) this.onReset();
    });
  }

  disable(reason) {
    this.disabled = true;
    this.close();
    this.onStatus(`off (${reason})`);
  }

  close() {
    if (this.es) this.es.close();
    this.es = null;
    this.key = null;
  }
}
