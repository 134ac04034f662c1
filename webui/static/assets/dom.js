// Small DOM helpers. Text always goes in as text (textContent), never as
// markup: job data, errors and names come from the store.

export function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  append(el, kids);
  return el;
}

function append(el, kids) {
  for (const k of kids) {
    if (k === undefined || k === null || k === false) continue;
    if (Array.isArray(k)) append(el, k);
    else el.append(k instanceof Node ? k : String(k));
  }
}

export function clear(el, ...kids) {
  el.replaceChildren();
  append(el, kids);
  return el;
}

// time formats an RFC 3339 time as the browser's local time, with its age.
export function time(s) {
  if (!s) return '';
  const d = new Date(s);
  if (Number.isNaN(d.getTime())) return s;
  return h('time', { datetime: s, title: s }, `${d.toLocaleString()} (${ago(d)})`);
}

export function ago(d) {
  const s = Math.round((Date.now() - d.getTime()) / 1000);
  const future = s < 0;
  const txt = age(Math.abs(s));
  return future ? `in ${txt}` : `${txt} ago`;
}

// age formats a number of seconds: 42s, 3m 5s, 2h 10m, 4d 3h.
export function age(sec) {
  sec = Math.round(sec);
  if (sec < 60) return `${sec}s`;
  const m = Math.floor(sec / 60);
  if (m < 60) return `${m}m ${sec % 60}s`;
  const hr = Math.floor(m / 60);
  if (hr < 24) return `${hr}h ${m % 60}m`;
  return `${Math.floor(hr / 24)}d ${hr % 24}h`;
}

// json shows a JSON value indented.
export function json(v) {
  return h('pre', { class: 'json' }, v === undefined ? '' : JSON.stringify(v, null, 2));
}

// sparkline draws counts as stacked bars in an SVG, one a bucket: ok,
// retried (amber) and failed (red); each bar's title says its counts.
export function sparkline(buckets) {
  const ns = 'http://www.w3.org/2000/svg';
  const w = 4, gap = 1, height = 20;
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('class', 'spark');
  svg.setAttribute('width', String(buckets.length * (w + gap)));
  svg.setAttribute('height', String(height));
  const base = document.createElementNS(ns, 'rect');
  base.setAttribute('x', '0');
  base.setAttribute('y', String(height - 1));
  base.setAttribute('width', svg.getAttribute('width'));
  base.setAttribute('height', '1');
  base.setAttribute('class', 'base');
  svg.append(base);
  const top = Math.max(1, ...buckets.map((b) => b.ok + (b.retried ?? 0) + b.failed));
  buckets.forEach((b, i) => {
    const parts = [[b.ok, 'ok'], [b.retried ?? 0, 'retried'], [b.failed, 'failed']]
      .map(([n, cls]) => [n ? Math.max(1, Math.round((n / top) * height)) : 0, cls]);
    // Each count shows at least 1 px: what that adds comes off the
    // tallest part, so the bar stays within the height.
    const over = parts.reduce((s, [bh]) => s + bh, 0) - height;
    if (over > 0) parts.reduce((a, p) => (p[0] > a[0] ? p : a))[0] -= over;
    let y = height;
    for (const [bh, cls] of parts) {
      if (!bh) continue;
      y -= bh;
      const r = document.createElementNS(ns, 'rect');
      r.setAttribute('x', String(i * (w + gap)));
      r.setAttribute('y', String(y));
      r.setAttribute('width', String(w));
      r.setAttribute('height', String(bh));
      r.setAttribute('class', cls);
      if (b.title) {
        const title = document.createElementNS(ns, 'title');
        title.textContent = b.title;
        r.append(title);
      }
      svg.append(r);
    }
  });
  return svg;
}
