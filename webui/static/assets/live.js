// Live follows GET /v1/events, the server-sent event stream of job
// changes, for some types (none: all). The browser's EventSource sends
// the session cookie, and on a reconnect the last event's id
// (Last-Event-ID), so the server resumes where the stream stopped; when
// it cannot, it sends a reset and the page reloads what it shows.
//
// An EventSource gives up for good when the server answers anything but
// the stream: 503 when the server serves as many streams as it may
// (http.max_event_streams), or a server that is stopping. Live then
// shows that live updates are paused and opens a new stream after a
// while, longer after each failure (1 s, doubled, at most 30 s), from
// the cursor of the last event it read (ready, job or reset), so that
// nothing committed meanwhile is missed; with no cursor yet, the page
// reloads what it shows once the stream is on.
//
// Events: "ready" with {cursor}, "job" with {type, id, state, outcome,
// attempts, at} and "reset" with {reason}; comment lines keep the
// connection open.
import { paths } from './api.js';

const retryFirst = 1000;
const retryMax = 30000;

export class Live {
  constructor({ onStatus, onEvent, onReset }) {
    this.onStatus = onStatus;
    this.onEvent = onEvent;
    this.onReset = onReset;
    this.es = null;
    this.key = null;
    this.types = [];
    this.disabled = false;
    this.cursor = ''; // the last event's id, for the types of key
    this.retryTimer = 0;
    this.retryDelay = 0; // the last wait before a new stream; 0: none failed
    this.missed = false; // a stream failed before any event: the page may be stale
  }

  // follow makes the stream carry the changes of types (all when empty).
  follow(types) {
    if (this.disabled) return;
    const key = [...types].sort().join('\n');
    if (this.key === key && (this.retryTimer || (this.es && this.es.readyState !== EventSource.CLOSED))) return;
    this.close();
    this.key = key;
    this.types = [...types];
    this.cursor = ''; // a new view reads what it shows: from now on
    this.retryDelay = 0;
    this.missed = false;
    this.open();
  }

  open() {
    const es = new EventSource(paths.events(this.types, this.cursor));
    this.es = es;
    if (!this.retryDelay) this.onStatus('connecting');
    const mine = () => this.es === es;
    const seen = (m) => {
      if (m.lastEventId) this.cursor = m.lastEventId;
    };
    es.addEventListener('open', () => {
      if (mine()) this.onStatus('on');
    });
    es.addEventListener('error', () => {
      if (!mine()) return;
      if (es.readyState === EventSource.CLOSED) {
        // The server answered something else than the stream (503
        // busy, a stop): the browser does not try again; Live does.
        this.retry();
        return;
      }
      // CONNECTING: the connection dropped; the browser reconnects
      // with the last event's id.
      this.onStatus('reconnecting');
    });
    es.addEventListener('ready', (m) => {
      if (!mine()) return;
      const stale = this.missed && !this.cursor;
      seen(m);
      this.retryDelay = 0;
      this.missed = false;
      this.onStatus('on');
      // Nothing told the page what changed while no stream ran.
      if (stale) this.onReset();
    });
    es.addEventListener('job', (m) => {
      if (!mine()) return;
      seen(m);
      let ev;
      try {
        ev = JSON.parse(m.data);
      } catch {
        return;
      }
      this.onEvent(ev);
    });
    es.addEventListener('reset', (m) => {
      if (!mine()) return;
      seen(m);
      this.onReset();
    });
  }

  // retry opens a new stream after a while, from the last cursor.
  retry() {
    if (this.es) this.es.close();
    this.es = null;
    this.missed = true;
    this.retryDelay = Math.min(this.retryDelay ? this.retryDelay * 2 : retryFirst, retryMax);
    this.onStatus('paused', `paused, retrying in ${Math.round(this.retryDelay / 1000)} s`);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = 0;
      if (!this.disabled && this.key !== null) this.open();
    }, this.retryDelay);
  }

  disable(reason) {
    this.disabled = true;
    this.close();
    this.onStatus(`off (${reason})`);
  }

  close() {
    clearTimeout(this.retryTimer);
    this.retryTimer = 0;
    if (this.es) this.es.close();
    this.es = null;
    this.key = null;
  }
}
