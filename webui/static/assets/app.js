// The UI's page: a view per URL fragment (see package webui's doc), each
// with a mount (the parts that stay: forms, headings) and a refresh (the
// data, read again from the API). Refreshes follow the event stream.
import { api, paths, abilities } from './api.js';
import { h, clear, time, age, json, sparkline } from './dom.js';
import { Live } from './live.js';

const view = document.getElementById('view');
const flashEl = document.getElementById('flash');
let me = { role: '', token: '', auth: '' };
let can = abilities('');
let current = null; // the view shown: { types, wants(ev), refresh() }
let generation = 0; // bumped at each navigation: late answers of an old view are dropped

// activityMinutes is the span of the overview's activity column: the
// types' history (GET /v1/types/{type}/history), minute by minute.
const activityMinutes = 60;

const live = new Live({
  onStatus: (status, text) => {
    const el = document.getElementById('live');
    el.textContent = `live: ${text ?? status}`;
    el.className = `live ${status === 'on' || status === 'paused' ? status : 'off'}`;
    el.dataset.status = status;
  },
  onEvent: (ev) => {
    if (current && current.wants(ev)) scheduleRefresh();
  },
  onReset: () => scheduleRefresh(true),
});

// scheduleRefresh reloads the current view once for a burst of events
// (at most every 250 ms), or at once.
let refreshTimer = 0;
function scheduleRefresh(now) {
  if (now) {
    clearTimeout(refreshTimer);
    refreshTimer = 0;
    refresh();
    return;
  }
  if (refreshTimer) return;
  refreshTimer = setTimeout(() => {
    refreshTimer = 0;
    refresh();
  }, 250);
}

async function refresh() {
  const v = current;
  if (!v) return;
  const gen = generation;
  try {
    await v.refresh(() => gen === generation);
    if (gen === generation) view.dataset.loaded = String(Number(view.dataset.loaded || 0) + 1);
  } catch (e) {
    if (gen === generation) flash(e);
  }
}

// activityOf sums a type's history (null: not read) into the
// sparkline's buckets: succeeded; retried (failed attempts to run again,
// and attempts the monitor took back); failed (jobs that finished
// failed or canceled).
function activityOf(history) {
  const buckets = [];
  const sum = { ok: 0, retried: 0, failed: 0 };
  for (const m of history?.minutes ?? []) {
    const b = { ok: m.succeeded, retried: m.retried + m.recycled, failed: m.failed + m.canceled };
    const at = new Date(m.at);
    const hhmm = `${String(at.getHours()).padStart(2, '0')}:${String(at.getMinutes()).padStart(2, '0')}`;
    b.title = `${hhmm}: ${m.succeeded} succeeded, ${m.failed} failed, ${m.canceled} canceled, ${m.retried} retried, ${m.recycled} recycled`;
    buckets.push(b);
    for (const k of ['ok', 'retried', 'failed']) sum[k] += b[k];
  }
  return { buckets, ...sum };
}

// flash shows an error or a message above the view.
function flash(msg, kind) {
  if (msg instanceof Error) {
    kind = 'error';
    msg = msg.status ? `${msg.status} ${msg.code}: ${msg.message}` : msg.message;
  }
  flashEl.className = `flash ${kind ?? 'info'}`;
  clear(flashEl, msg);
  flashEl.hidden = false;
}

function unflash() {
  flashEl.hidden = true;
  flashEl.replaceChildren();
}

// act runs an action of a button, shows its error, and refreshes.
async function act(button, fn) {
  button.disabled = true;
  unflash();
  try {
    await fn();
    await refresh();
  } catch (e) {
    flash(e);
  } finally {
    button.disabled = false;
  }
}

function button(label, attrs, fn) {
  const b = h('button', { type: 'button', ...attrs }, label);
  b.addEventListener('click', () => act(b, fn));
  return b;
}

const hrefType = (t, q) => `#/types/${encodeURIComponent(t)}${q ? `?${new URLSearchParams(q)}` : ''}`;
const hrefJob = (t, id) => `#/types/${encodeURIComponent(t)}/jobs/${encodeURIComponent(id)}`;
const hrefWorkflow = (id) => `#/workflows/${encodeURIComponent(id)}`;

function stateText(j) {
  return j.outcome ? `${j.state} (${j.outcome})` : j.state;
}

// attemptsText: a job's max_attempts of 0 means its type's retry policy.
function attemptsText(j) {
  return j.max_attempts ? `${j.attempts} of ${j.max_attempts}` : `${j.attempts} (type's limit)`;
}

function stateBadge(j) {
  return h('span', { class: `badge ${j.outcome || j.state}` }, stateText(j));
}

// ---- Views ----

function overview() {
  const table = h('table', { id: 'types-table', class: 'grid' });
  clear(view,
    h('h1', {}, 'Job types'),
    h('p', { class: 'hint' }, `Activity: the last ${activityMinutes} minutes, minute by minute, as the store counts them: jobs succeeded, attempts retried or taken back (amber), jobs failed or canceled (red).`),
    table);
  return {
    types: [],
    wants: () => true,
    async refresh(fresh) {
      const { types } = await api('GET', paths.types());
      const stats = await Promise.all(types.map((t) => (t.name && !t.error
        ? api('GET', paths.stats(t.name)).catch(() => null) : null)));
      const histories = await Promise.all(types.map((t) => (t.name
        ? api('GET', paths.history(t.name, activityMinutes)).catch(() => null) : null)));
      if (!fresh()) return;
      const rows = types.map((t, i) => {
        const s = stats[i];
        const paused = t.settings?.paused;
        const act = activityOf(histories[i]);
        return h('tr', { class: 'type-row', dataset: { type: t.name } },
          h('td', {}, can.list ? h('a', { href: hrefType(t.name) }, t.name) : t.name,
            t.error ? h('div', { class: 'error' }, t.error) : null),
          h('td', { class: 'num pending' }, t.pending),
          h('td', { class: 'num running' }, t.running),
          h('td', { class: 'num finished' }, t.finished),
          h('td', { class: 'paused' }, paused ? h('span', { class: 'badge paused' }, 'paused') : h('span', { class: 'badge active' }, 'active')),
          h('td', { class: 'oldest' }, s?.oldest_due_at ? age(s.oldest_due_age) : '—'),
          h('td', { class: 'activity' }, histories[i]
            ? [sparkline(act.buckets), ' ', h('span', { class: 'summary' }, `${act.ok} ok · ${act.retried} retried · ${act.failed} failed`)]
            : '—'),
          h('td', { class: 'actions' }, can.pause
            ? (paused
              ? button('Resume', { class: 'resume' }, () => api('POST', `${paths.type(t.name)}/resume`))
              : button('Pause', { class: 'pause' }, () => api('POST', `${paths.type(t.name)}/pause`)))
            : null));
      });
      clear(table,
        h('thead', {}, h('tr', {},
          ['Type', 'Pending', 'Running', 'Finished', 'State', 'Oldest due', 'Activity', ''].map((c) => h('th', {}, c)))),
        h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: 8 }, 'No job types are registered.'))));
    },
  };
}

// The filters of a type's job list, as the fragment's query holds them
// and the list route takes them: key, id_prefix, and since and until in
// RFC 3339 (UTC).
const filterNames = ['key', 'id_prefix', 'since', 'until'];

// localInput is an RFC 3339 time as a datetime-local input shows it
// (the browser's local time); '' for none or one that does not parse.
function localInput(iso) {
  const d = new Date(iso || '');
  if (!iso || Number.isNaN(d.getTime())) return '';
  const l = new Date(d.getTime() - d.getTimezoneOffset() * 60000);
  return l.toISOString().slice(0, d.getSeconds() || d.getMilliseconds() ? 19 : 16);
}

// utcOf is a datetime-local input's value (local time) in RFC 3339, UTC;
// '' for none.
function utcOf(local) {
  const d = new Date(local);
  return local && !Number.isNaN(d.getTime()) ? d.toISOString() : '';
}

function typeJobs(type, q) {
  const state = ['pending', 'running', 'finished'].includes(q.get('state')) ? q.get('state') : 'pending';
  const cursor = q.get('cursor') || '';
  const limit = ['25', '100', '500'].includes(q.get('limit')) ? q.get('limit') : '25';
  const filters = {};
  for (const n of filterNames) if (q.get(n)) filters[n] = q.get(n);
  const filtered = Object.keys(filters).length > 0;
  // when: the time of the state that since and until bound, and the
  // column that shows it.
  const when = { pending: ['Scheduled', 'scheduled_at'], running: ['Started', 'started_at'], finished: ['Finished', 'finished_at'] }[state];
  const idFilter = h('input', { id: 'filter-id', type: 'search', placeholder: 'id prefix', value: filters.id_prefix || '' });
  const keyFilter = h('input', { id: 'filter-key', type: 'search', placeholder: 'key', value: filters.key || '' });
  const sinceFilter = h('input', { id: 'filter-since', type: 'datetime-local', step: '1', value: localInput(filters.since) });
  const untilFilter = h('input', { id: 'filter-until', type: 'datetime-local', step: '1', value: localInput(filters.until) });
  const head = h('div', { class: 'type-head' });
  const table = h('table', { id: 'jobs-table', class: 'grid' });
  const pager = h('div', { class: 'pager' });
  const unreadable = h('div', { id: 'unreadable' });

  // A change of a filter lists from the first page: a cursor goes with
  // the filters it was made with.
  const applyFilters = () => {
    const nq = { state, limit };
    if (idFilter.value) nq.id_prefix = idFilter.value;
    if (keyFilter.value) nq.key = keyFilter.value;
    // A time the input shows as it was keeps what the input cannot
    // show (milliseconds).
    for (const [n, input] of [['since', sinceFilter], ['until', untilFilter]]) {
      const v = input.value === localInput(filters[n]) ? filters[n] : utcOf(input.value);
      if (v) nq[n] = v;
    }
    location.hash = hrefType(type, nq);
  };
  for (const input of [idFilter, keyFilter, sinceFilter, untilFilter]) input.addEventListener('change', applyFilters);
  const openId = h('input', { id: 'open-id', placeholder: 'job id' });
  const openForm = h('form', { class: 'inline', onsubmit: (e) => {
    e.preventDefault();
    if (openId.value.trim()) location.hash = hrefJob(type, openId.value.trim());
  } }, openId, h('button', { type: 'submit' }, 'Open'));

  clear(view,
    h('p', { class: 'crumbs' }, h('a', { href: '#/' }, 'Types'), ' / ', type),
    head,
    h('nav', { class: 'tabs' }, ['pending', 'running', 'finished'].map((s) =>
      h('a', { href: hrefType(type, { state: s, limit, ...filters }), class: s === state ? 'tab current' : 'tab', dataset: { state: s } }, s))),
    h('div', { class: 'filters', id: 'filters' },
      h('label', {}, 'Filter: ', idFilter, ' ', keyFilter),
      h('label', {}, `${when[0]} from `, sinceFilter),
      h('label', {}, 'until ', untilFilter),
      filtered ? h('a', { id: 'clear-filters', href: hrefType(type, { state, limit }) }, 'Clear filters') : null),
    h('div', { class: 'filters' },
      h('label', {}, 'Per page ', h('select', { id: 'limit', onchange: (e) => {
        location.hash = hrefType(type, { state, limit: e.target.value, ...filters });
      } }, ['25', '100', '500'].map((n) => h('option', { value: n, selected: n === limit }, n)))),
      openForm),
    table, unreadable, pager,
    can.enqueue ? enqueueForm(type) : null);

  return {
    types: [type],
    wants: (ev) => ev.type === type,
    async refresh(fresh) {
      const o = { state, limit, ...filters };
      if (cursor) o.cursor = cursor;
      const [page, types] = await Promise.all([
        api('GET', paths.jobs(type, o)),
        api('GET', paths.types()),
      ]);
      if (!fresh()) return;
      const info = types.types.find((t) => t.name === type);
      renderTypeHead(head, type, info);
      const jobs = page.jobs;
      // A filtered page reads a bounded part of the list: it may be
      // short, or empty, with a next page.
      const none = !filtered ? `No ${state} job.`
        : page.next ? 'No job on this page matches the filters; the next pages may have some.'
          : `No ${state} job ${cursor ? 'on this page ' : ''}matches the filters.`;
      const held = state === 'running';
      const cols = ['ID', 'State', 'Attempts', 'Key', 'Priority', when[0], ...(held ? ['Held by'] : []), 'Error'];
      clear(table,
        h('thead', {}, h('tr', {}, cols.map((c) => h('th', {}, c)))),
        h('tbody', {}, jobs.length ? jobs.map((j) => h('tr', { class: 'job-row', dataset: { id: j.id, state: j.state, outcome: j.outcome || '' } },
          h('td', {}, h('a', { href: hrefJob(type, j.id) }, j.id)),
          h('td', {}, stateBadge(j)),
          h('td', { class: 'num' }, attemptsText(j)),
          h('td', {}, j.key || ''),
          h('td', { class: 'num' }, j.priority),
          h('td', {}, time(j[when[1]])),
          held ? h('td', { class: 'holder' }, j.holder || '') : null,
          h('td', { class: 'error' }, (j.error || '').slice(0, 120)),
        )) : h('tr', { class: 'empty' }, h('td', { colspan: cols.length }, none))));
      clear(unreadable, (page.unreadable || []).length ? [
        h('h3', {}, 'Entries that cannot be read'),
        h('ul', {}, page.unreadable.map((u) => h('li', {}, u.id ? `${u.id}: ` : '', u.error, ' ', h('code', {}, u.key)))),
      ] : null);
      const nq = { state, limit, ...filters };
      clear(pager,
        cursor ? h('a', { href: hrefType(type, nq), id: 'first-page' }, '« First page') : null,
        page.next ? h('a', { href: hrefType(type, { ...nq, cursor: page.next }), id: 'next-page' }, 'Next page »') : null);
    },
  };
}

function renderTypeHead(head, type, info) {
  const paused = info?.settings?.paused;
  clear(head,
    h('h1', {}, type, ' ', info ? h('span', { id: 'type-state', class: `badge ${paused ? 'paused' : 'active'}` }, paused ? 'paused' : 'active') : null),
    info ? h('p', { class: 'counts' },
      `${info.pending} pending · ${info.running} running · ${info.finished} finished`) : null,
    can.pause && info ? (paused
      ? button('Resume', { id: 'resume' }, () => api('POST', `${paths.type(type)}/resume`))
      : button('Pause', { id: 'pause' }, () => api('POST', `${paths.type(type)}/pause`))) : null);
}

function enqueueForm(type) {
  const id = h('input', { id: 'enqueue-id', placeholder: 'id (empty: the server makes one)' });
  const key = h('input', { id: 'enqueue-key', placeholder: 'fairness key (optional)' });
  const priority = h('input', { id: 'enqueue-priority', type: 'number', value: '0', step: '1' });
  const data = h('textarea', { id: 'enqueue-data', rows: 5, spellcheck: 'false' });
  data.value = '{}';
  const submit = h('button', { id: 'enqueue-submit', type: 'submit' }, 'Enqueue');
  const form = h('form', { id: 'enqueue-form', class: 'card' },
    h('h2', {}, 'Enqueue a job'),
    h('label', {}, 'Data (JSON)', data),
    h('div', { class: 'row' }, h('label', {}, 'ID ', id), h('label', {}, 'Key ', key), h('label', {}, 'Priority ', priority)),
    submit);
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    act(submit, async () => {
      const text = data.value.trim() || 'null';
      try {
        JSON.parse(text);
      } catch (err) {
        throw new Error(`The data is not JSON: ${err.message}`);
      }
      // The data goes as written, so numbers keep every digit.
      const extra = {};
      if (id.value.trim()) extra.id = id.value.trim();
      if (key.value.trim()) extra.key = key.value.trim();
      if (Number(priority.value)) extra.priority = Number(priority.value);
      const rest = JSON.stringify(extra).slice(1, -1);
      const job = await api('POST', paths.jobs(type), `{"data":${text}${rest ? `,${rest}` : ''}}`);
      flash(h('span', { id: 'enqueued' }, 'Enqueued ', h('a', { href: hrefJob(type, job.id) }, job.id), '.'));
    });
  });
  return form;
}

function jobView(type, id) {
  const body = h('div', { id: 'job' });
  clear(view,
    h('p', { class: 'crumbs' }, h('a', { href: '#/' }, 'Types'), ' / ', can.list ? h('a', { href: hrefType(type) }, type) : type, ' / ', id),
    body);
  let confirmDelete = false;
  return {
    types: [type],
    wants: (ev) => ev.type === type && ev.id === id,
    async refresh(fresh) {
      let j;
      try {
        j = await api('GET', paths.job(type, id));
      } catch (e) {
        if (e.status !== 404) throw e;
        if (fresh()) clear(body, h('h1', {}, id), h('p', { id: 'job-missing' }, e.message));
        return;
      }
      const parents = j.workflow && can.list ? await api('GET', paths.parents(type, id)).catch(() => null) : null;
      if (!fresh()) return;
      const actions = h('div', { class: 'actions', id: 'job-actions' });
      if (can.cancel && (j.state === 'pending' || j.state === 'running')) {
        actions.append(button('Cancel', { id: 'cancel' }, () => api('POST', paths.job(type, id, 'cancel'))));
      }
      if (can.requeue && j.state === 'finished') {
        actions.append(button(j.outcome === 'failed' ? 'Retry' : 'Requeue', { id: 'requeue' }, () => api('POST', paths.job(type, id, 'requeue'))));
      }
      if (can.remove) {
        const del = h('button', { type: 'button', id: 'delete', class: 'danger' }, confirmDelete ? 'Really delete' : 'Delete');
        del.addEventListener('click', () => {
          if (!confirmDelete) {
            confirmDelete = true;
            del.textContent = 'Really delete';
            return;
          }
          act(del, async () => {
            await api('DELETE', paths.job(type, id));
            location.hash = hrefType(type, { state: j.state });
          });
        });
        actions.append(del);
      }
      const row = (k, v) => (v === undefined || v === null || v === '' ? null : [h('dt', {}, k), h('dd', { dataset: { field: k } }, v)]);
      clear(body,
        h('h1', {}, id, ' ', stateBadge(j)),
        actions,
        h('dl', { class: 'fields' },
          row('type', j.type),
          row('state', stateText(j)),
          row('attempts', attemptsText(j)),
          row('priority', String(j.priority)),
          row('key', j.key),
          row('holder', j.holder),
          row('trace_id', j.trace_id),
          row('workflow', j.workflow ? h('a', { href: hrefWorkflow(j.workflow) }, j.workflow) : null),
          row('node', j.node),
          row('resubmitted', j.resubmitted ? 'yes: it goes back to pending when its worker finishes' : null),
          row('added', time(j.added_at)),
          row('scheduled', time(j.scheduled_at)),
          row('started', time(j.started_at)),
          row('heartbeat', time(j.heartbeat_at)),
          row('finished', time(j.finished_at))),
        j.error ? [h('h2', {}, 'Error (last attempt)'), h('pre', { id: 'job-error', class: 'error' }, j.error)] : null,
        j.errors?.length ? [h('h2', {}, 'Failed attempts'),
          h('table', { id: 'job-errors', class: 'grid' },
            h('thead', {}, h('tr', {}, ['Attempt', 'Ended', 'Error'].map((c) => h('th', {}, c)))),
            h('tbody', {}, j.errors.map((e) => h('tr', { class: 'attempt-error', dataset: { attempt: e.attempt } },
              h('td', { class: 'num' }, e.attempt),
              h('td', {}, time(e.at)),
              h('td', {}, h('pre', { class: 'error' }, e.error))))))] : null,
        h('h2', {}, 'Data'), h('div', { id: 'job-data' }, json(j.data)),
        j.result !== undefined ? [h('h2', {}, 'Result'), h('div', { id: 'job-result' }, json(j.result))] : null,
        j.progress !== undefined ? [h('h2', {}, 'Progress'), h('div', { id: 'job-progress' }, json(j.progress))] : null,
        parents && Object.keys(parents.parents).length ? [h('h2', {}, 'Depends on'),
          h('ul', {}, Object.entries(parents.parents).map(([name, p]) =>
            h('li', {}, `${name}: `, h('a', { href: hrefJob(p.type, p.id) }, `${p.type}/${p.id}`), ' ', stateBadge(p))))] : null);
    },
  };
}

// ---- Fairness keys ----
// A type's keys view (#/types/{type}/keys?after=&limit=) and the tab that
// leads to it from the type's jobs, shown when the type has keys.

const hrefKeys = (t, q) => `#/types/${encodeURIComponent(t)}/keys${q && Object.keys(q).length ? `?${new URLSearchParams(q)}` : ''}`;
const keysPath = (t, q) => `${paths.type(t)}/keys?${new URLSearchParams(q)}`;

// hasKeys reads whether a type has fairness keys: keys with jobs, or
// named policies (the jobs without a key alone are none).
async function hasKeys(type) {
  const page = await api('GET', keysPath(type, { limit: 1 }));
  return page.keys.some((k) => k.key !== '');
}

// withKeysTab adds to a view of a type's jobs a keys tab, shown while
// the type has keys, checked at each refresh of the view.
function withKeysTab(v, type) {
  const tab = h('a', { href: hrefKeys(type), class: 'tab', id: 'keys-tab', dataset: { state: 'keys' }, hidden: true }, 'keys');
  view.querySelector('nav.tabs')?.append(tab);
  const inner = v.refresh;
  v.refresh = async (fresh) => {
    const [, show] = await Promise.all([inner(fresh), hasKeys(type).catch(() => false)]);
    if (fresh()) tab.hidden = !show;
  };
  return v;
}

function keyCells(k) {
  const p = k.policy;
  const w = k.window;
  let win = '—';
  if (w) {
    win = w.current
      ? h('span', {}, `${w.started} of ${p.max_starts} until `, time(w.end))
      : h('span', { class: 'muted' }, `ended `, time(w.end), ` (${w.started} started)`);
  }
  return [
    h('td', { class: 'key' }, k.key === '' ? h('span', { class: 'muted' }, '(no key)') : k.key),
    h('td', { class: 'policy' }, k.key === '' ? 'no key' : k.named ? h('span', { class: 'badge named' }, 'named') : 'default'),
    h('td', { class: 'num weight' }, p.weight),
    h('td', { class: 'num max-running' }, p.max_running || '—'),
    h('td', { class: 'max-starts' }, p.max_starts ? `${p.max_starts} per ${p.per}` : '—'),
    h('td', { class: 'num zones' }, p.zones),
    h('td', { class: 'num ready' }, k.ready_zones),
    h('td', { class: 'num running' }, k.running ?? '—'),
    h('td', { class: 'window' }, win),
  ];
}

function typeKeys(type, q) {
  const after = q.get('after') || '';
  const limit = ['25', '100', '200'].includes(q.get('limit')) ? q.get('limit') : '25';
  const head = h('div', { class: 'type-head' });
  const table = h('table', { id: 'keys-table', class: 'grid' });
  const pager = h('div', { class: 'pager' });
  const unreadable = h('div', { id: 'unreadable' });
  clear(view,
    h('p', { class: 'crumbs' }, h('a', { href: '#/' }, 'Types'), ' / ', h('a', { href: hrefType(type) }, type), ' / keys'),
    head,
    h('nav', { class: 'tabs' },
      ['pending', 'running', 'finished'].map((s) => h('a', { href: hrefType(type, { state: s }), class: 'tab', dataset: { state: s } }, s)),
      h('a', { href: hrefKeys(type), class: 'tab current', id: 'keys-tab', dataset: { state: 'keys' } }, 'keys')),
    h('p', { class: 'hint' }, 'The fairness keys with ready jobs, running jobs or a named policy, in key order: the policy that applies, the zones marked as holding ready jobs, the jobs running and the rate window.'),
    h('div', { class: 'filters' },
      h('label', {}, 'Per page ', h('select', { id: 'keys-limit', onchange: (e) => {
        location.hash = hrefKeys(type, { limit: e.target.value });
      } }, ['25', '100', '200'].map((n) => h('option', { value: n, selected: n === limit }, n))))),
    table, unreadable, pager);
  return {
    types: [type],
    wants: (ev) => ev.type === type,
    async refresh(fresh) {
      const o = { limit };
      if (after) o.after = after;
      const [page, types] = await Promise.all([api('GET', keysPath(type, o)), api('GET', paths.types())]);
      if (!fresh()) return;
      renderTypeHead(head, type, types.types.find((t) => t.name === type));
      const none = !after && !page.keys.some((k) => k.key !== '');
      clear(table,
        h('thead', {}, h('tr', {}, ['Key', 'Policy', 'Weight', 'Max running', 'Max starts', 'Zones', 'Ready zones', 'Running', 'Rate window'].map((c) => h('th', {}, c)))),
        h('tbody', {},
          page.keys.map((k) => h('tr', { class: 'key-row', dataset: { key: k.key } }, keyCells(k))),
          none ? h('tr', { class: 'empty', id: 'no-keys' }, h('td', { colspan: 9 }, 'This type has no fairness keys: no job of it has a key, and its settings name none.')) : null,
          !none && !page.keys.length ? h('tr', { class: 'empty' }, h('td', { colspan: 9 }, 'No key on this page.')) : null));
      clear(unreadable, (page.unreadable || []).length ? [
        h('h3', {}, 'Entries that cannot be read'),
        h('ul', {}, page.unreadable.map((u) => h('li', {}, u.error, ' ', h('code', {}, u.key)))),
      ] : null);
      clear(pager,
        after ? h('a', { href: hrefKeys(type, { limit }), id: 'keys-first-page' }, '« First page') : null,
        page.next ? h('a', { href: hrefKeys(type, { limit, after: page.next }), id: 'keys-next-page' }, 'Next page »') : null);
    },
  };
}

function schedules() {
  const table = h('table', { id: 'schedules-table', class: 'grid' });
  clear(view, h('h1', {}, 'Periodic schedules'), table);
  return {
    types: null, // no job changes to follow
    wants: () => false,
    async refresh(fresh) {
      const { schedules: list } = await api('GET', paths.schedules());
      if (!fresh()) return;
      clear(table,
        h('thead', {}, h('tr', {}, ['Name', 'Type', 'When', 'State', 'Next', 'Last job', 'Fired', 'Skipped'].map((c) => h('th', {}, c)))),
        h('tbody', {}, list.length ? list.map((s) => h('tr', { class: 'schedule-row', dataset: { name: s.name } },
          h('td', {}, s.name, s.error ? h('div', { class: 'error' }, s.error) : null),
          h('td', {}, s.type && can.list ? h('a', { href: hrefType(s.type) }, s.type) : s.type || ''),
          h('td', {}, s.cron ? `cron ${s.cron}${s.timezone ? ` (${s.timezone})` : ''}` : s.every ? `every ${s.every}` : ''),
          h('td', {}, s.paused ? h('span', { class: 'badge paused' }, 'paused') : h('span', { class: 'badge active' }, 'active')),
          h('td', {}, time(s.next)),
          h('td', {}, s.last_job ? h('a', { href: hrefJob(s.type, s.last_job) }, s.last_job) : ''),
          h('td', { class: 'num' }, s.fired),
          h('td', { class: 'num' }, s.skipped),
        )) : h('tr', {}, h('td', { colspan: 8 }, 'No schedules.'))));
    },
  };
}

function workflowView(id) {
  const input = h('input', { id: 'workflow-id', placeholder: 'workflow id', value: id || '' });
  const body = h('div', { id: 'workflow' });
  clear(view,
    h('h1', {}, 'Workflows'),
    h('form', { class: 'inline', onsubmit: (e) => {
      e.preventDefault();
      if (input.value.trim()) location.hash = hrefWorkflow(input.value.trim());
    } }, input, h('button', { type: 'submit' }, 'Open')),
    body);
  let types = [];
  const v = {
    types: null, // followed once the workflow's types are known
    wants: (ev) => types.includes(ev.type),
    async refresh(fresh) {
      if (!id) return;
      const w = await api('GET', paths.workflow(id));
      if (!fresh()) return;
      types = [...new Set(w.jobs.map((n) => n.type).filter(Boolean))];
      clear(body,
        h('h2', {}, w.id, ' ', h('span', { class: `badge ${w.done ? 'succeeded' : 'running'}` }, w.canceled ? 'canceled' : w.done ? 'done' : 'running')),
        h('p', {}, `policy ${w.policy} · created `, time(w.created_at)),
        h('table', { class: 'grid', id: 'workflow-table' },
          h('thead', {}, h('tr', {}, ['Name', 'Type', 'Job', 'Depends on', 'State', 'Job state'].map((c) => h('th', {}, c)))),
          h('tbody', {}, w.jobs.map((n) => h('tr', { class: 'node-row', dataset: { name: n.name } },
            h('td', {}, n.name),
            h('td', {}, n.type || ''),
            h('td', {}, n.job ? h('a', { href: hrefJob(n.type, n.id) }, n.id) : n.id),
            h('td', {}, (n.depends_on || []).join(', ')),
            h('td', {}, n.state || '', n.error ? h('div', { class: 'error' }, n.error) : null),
            h('td', {}, n.job ? stateBadge(n.job) : ''))))));
      if (can.live) live.follow(types);
    },
  };
  return v;
}

function forbidden(what) {
  clear(view, h('h1', {}, 'Not for this token'), h('p', { id: 'forbidden' }, `Token ${me.token} has role ${me.role}, which may not ${what}.`));
  return { types: null, wants: () => false, refresh: async () => {} };
}

// ---- Routing ----

function route() {
  generation++;
  unflash();
  clearTimeout(refreshTimer);
  refreshTimer = 0;
  const raw = location.hash.replace(/^#/, '') || '/';
  const [path, query] = raw.split('?');
  const q = new URLSearchParams(query || '');
  const parts = path.split('/').filter(Boolean).map((p) => {
    try {
      return decodeURIComponent(p);
    } catch {
      return p;
    }
  });
  let nav = 'overview';
  if (parts[0] === 'types' && parts.length === 2) {
    current = can.list ? withKeysTab(typeJobs(parts[1], q), parts[1]) : forbidden('list jobs');
  } else if (parts[0] === 'types' && parts[2] === 'keys' && parts.length === 3) {
    current = can.list ? typeKeys(parts[1], q) : forbidden('list keys');
  } else if (parts[0] === 'types' && parts[2] === 'jobs' && parts.length === 4) {
    current = jobView(parts[1], parts[3]);
  } else if (parts[0] === 'schedules') {
    nav = 'schedules';
    current = can.list ? schedules() : forbidden('read schedules');
  } else if (parts[0] === 'workflows') {
    nav = 'workflows';
    current = can.list ? workflowView(parts[1]) : forbidden('read workflows');
  } else {
    current = can.readTypes ? overview() : forbidden('read the job types');
  }
  for (const a of document.querySelectorAll('[data-nav]')) a.classList.toggle('current', a.dataset.nav === nav);
  view.dataset.view = nav;
  if (can.live && current.types) live.follow(current.types);
  refresh();
}

async function start() {
  try {
    me = await api('GET', '/v1/whoami');
  } catch (e) {
    if (e.status !== 401) flash(e);
    return;
  }
  can = abilities(me.role);
  document.body.dataset.role = me.role;
  clear(document.getElementById('who'), me.auth === 'none' ? 'local access (no tokens)' : `${me.token} · ${me.role}`);
  const logout = document.getElementById('logout');
  logout.hidden = me.auth !== 'cookie';
  logout.addEventListener('click', async () => {
    try {
      await api('POST', '/v1/logout');
    } finally {
      location.replace('/ui/login.html');
    }
  });
  if (!can.live) live.disable('not for this role');
  window.addEventListener('hashchange', route);
  route();
}

start();
