/**
 * `live.js`, served at /admin/ledger/live.js: every 2 s it re-fetches the
 * page's live region (`#live[data-src]`, the same server-rendered HTML) and
 * swaps it in when it changed — no full reload, no framework, no build step.
 * It leaves the region alone while the operator is in one of its form fields,
 * and sends a browser whose session ended back to the login form.
 */
export const LIVE_JS = `(function () {
  var el = document.getElementById('live');
  if (!el) return;
  var src = el.getAttribute('data-src');
  var last = null;
  function busy() {
    var a = document.activeElement;
    return a && el.contains(a) && (a.tagName === 'INPUT' || a.tagName === 'SELECT' || a.tagName === 'TEXTAREA');
  }
  function tick() {
    if (busy()) return;
    fetch(src, { credentials: 'same-origin', headers: { accept: 'text/html' } })
      .then(function (r) {
        if (r.status === 401) { window.location.href = '/admin/login'; return null; }
        return r.ok ? r.text() : null;
      })
      .then(function (html) {
        if (html === null || html === last || busy()) return;
        if (last !== null || html !== el.innerHTML) el.innerHTML = html;
        last = html;
        el.setAttribute('data-refreshed', String(Date.now()));
      })
      .catch(function () {});
  }
  setInterval(tick, 2000);
})();
`;
