// The HTTP API as the UI calls it: same origin, the session cookie, and
// the header that lets a cookie-authenticated request change anything.

export class APIError extends Error {
  constructor(status, code, message) {
    super(message || code);
    this.status = status;
    this.code = code;
  }
}

// api sends a request and answers the decoded JSON (null for 204). body
// is a string of JSON, sent as it is, or a value to encode.
export async function api(method, path, body) {
  const headers = { 'Accept': 'application/json', 'X-Jobstage-UI': '1' };
  const init = { method, headers, credentials: 'same-origin' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
  }
  const r = await fetch(path, init);
  if (r.status === 401) {
    location.replace('/ui/login.html');
    throw new APIError(401, 'unauthorized', 'not logged in');
  }
  if (r.status === 204) return null;
  const text = await r.text();
  let v = null;
  try {
    v = text ? JSON.parse(text) : null;
  } catch {
    // not JSON: reported below when the status is an error
  }
  if (!r.ok) throw new APIError(r.status, v?.error ?? `http_${r.status}`, v?.message ?? text);
  return v;
}

const seg = encodeURIComponent;

// A browser removes the dot segments "." and ".." from a path, even sent
// escaped (%2E%2E), so a job an earlier version stored under such an id
// is named by the routes' query form, /v1/types/{type}/job?id=….
const dotSegment = (s) => s === '.' || s === '..';

export const paths = {
  types: () => '/v1/types',
  type: (t) => `/v1/types/${seg(t)}`,
  stats: (t) => `/v1/types/${seg(t)}/stats`,
  history: (t, minutes) => `/v1/types/${seg(t)}/history?minutes=${minutes}`,
  jobs: (t, q) => `/v1/types/${seg(t)}/jobs${q ? `?${new URLSearchParams(q)}` : ''}`,
  // job is a job's route, or with action its …/cancel or …/requeue.
  job: (t, id, action) => (dotSegment(id)
    ? `/v1/types/${seg(t)}/job${action ? `/${action}` : ''}?id=${seg(id)}`
    : `/v1/types/${seg(t)}/jobs/${seg(id)}${action ? `/${action}` : ''}`),
  parents: (t, id) => `/v1/types/${seg(t)}/jobs/${seg(id)}/parents`,
  schedules: () => '/v1/schedules',
  workflow: (id) => `/v1/workflows/${seg(id)}`,
  events: (types, cursor) => {
    const q = new URLSearchParams();
    for (const t of types) q.append('type', t);
    if (cursor) q.set('cursor', cursor);
    const s = q.toString();
    return `/v1/events${s ? `?${s}` : ''}`;
  },
};

// What each role may do, as httpapi's route table says (the API refuses
// the rest anyway; this only hides buttons).
export function abilities(role) {
  const admin = role === 'admin';
  const producer = admin || role === 'producer';
  return {
    list: producer, // list jobs, schedules, workflows
    readTypes: producer || role === 'worker',
    enqueue: producer,
    cancel: producer,
    requeue: producer,
    remove: admin,
    pause: admin, // pause and resume a type
    live: producer, // GET /v1/events
  };
}
