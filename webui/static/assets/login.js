// The login page: POST /v1/login sets the session cookie, then the UI.
const form = document.getElementById('login-form');
const error = document.getElementById('login-error');

form.addEventListener('submit', async (ev) => {
  ev.preventDefault();
  error.hidden = true;
  const token = document.getElementById('token').value;
  try {
    const r = await fetch('/v1/login', {
      method: 'POST',
      credentials: 'same-origin',
      headers: { 'Content-Type': 'application/json', 'X-Jobstage-UI': '1' },
      body: JSON.stringify({ token }),
    });
    if (r.ok) {
      location.replace('/ui/');
      return;
    }
    let msg = `${r.status}`;
    try {
      const e = await r.json();
      msg = e.error === 'unauthorized' ? 'Unknown token.' : e.message;
    } catch { /* not JSON: the status says it */ }
    showError(msg);
  } catch (e) {
    showError(`The server did not answer: ${e.message}`);
  }
});

function showError(msg) {
  error.textContent = msg;
  error.hidden = false;
}
