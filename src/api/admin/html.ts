/**
 * HTML building blocks of the operator pages: escaping (every value that
 * reaches a page goes through `esc`), the page frame with its navigation, and
 * small formatters. No templates, no client framework: pages are server
 * rendered and `live.js` swaps their live region.
 */

export function esc(value: unknown): string {
  let text: string;
  if (value === null || value === undefined) text = '';
  else if (value instanceof Date) text = value.toISOString();
  else if (typeof value === 'string') text = value;
  else if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') text = String(value);
  else text = JSON.stringify(value) ?? '';
  return text
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');
}

/** A value as display text: dates as ISO, null as an em dash. */
export function show(value: unknown): string {
  if (value === null || value === undefined || value === '') return '—';
  return esc(value);
}

/** A JSON document in a collapsible block. */
export function docBlock(label: string, doc: unknown, open = false): string {
  if (doc === null || doc === undefined) return `<span class="muted">no ${esc(label)}</span>`;
  return `<details${open ? ' open' : ''}><summary>${esc(label)}</summary><pre>${esc(JSON.stringify(doc, null, 2))}</pre></details>`;
}

export type Verification = 'verified' | 'mismatch' | 'absent';

/** A stored hash beside whether it matches its canonical document. */
export function hashCell(hash: unknown, verification: Verification): string {
  if (verification === 'absent') return `<span class="muted">—</span>`;
  const badge =
    verification === 'verified'
      ? '<span class="ok" data-verified="true">verified</span>'
      : '<span class="bad" data-verified="false">NOT verified</span>';
  return `${badge} <code title="${esc(hash)}">${esc(String(hash).slice(0, 12))}…</code>`;
}

const STYLE = `
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d232b;background:#f6f7f9}
header{background:#1d232b;color:#fff;padding:8px 16px;display:flex;gap:16px;align-items:center}
header a{color:#cfe3ff;text-decoration:none} header form{margin-left:auto}
main{padding:16px} table{border-collapse:collapse;width:100%;background:#fff;margin:8px 0 16px}
th,td{border:1px solid #dde1e6;padding:4px 6px;text-align:left;vertical-align:top} th{background:#eef1f4}
pre{max-width:560px;overflow:auto;font-size:12px;margin:4px 0} code{font-size:12px}
.muted{color:#7a8490} .ok{color:#116b2f;font-weight:600} .bad{color:#b00020;font-weight:700}
.state{font-weight:600} .notice{padding:8px 12px;border-radius:4px;margin:8px 0}
.notice.conflict{background:#fde8ea;border:1px solid #b00020} .notice.done{background:#e6f4ea;border:1px solid #116b2f}
.action{background:#fff;border:1px solid #dde1e6;padding:8px 12px;margin:8px 0}
button{font:inherit;padding:4px 12px;cursor:pointer} form.filters{display:flex;gap:8px;align-items:end;flex-wrap:wrap}
label{display:flex;flex-direction:column;font-size:12px;color:#4b5560}`;

export function page(title: string, body: string, options: { nav?: boolean } = {}): string {
  const nav =
    options.nav === false
      ? ''
      : `<a href="/admin/ledger">Operations</a><a href="/admin/ledger/deletions">Workspace deletions</a><a href="/admin/queues">Queues (Bull Board)</a>
<form method="post" action="/admin/logout"><button type="submit">Log out</button></form>`;
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${esc(title)} · taskledger</title>
<meta name="viewport" content="width=device-width,initial-scale=1"><style>${STYLE}</style></head>
<body><header><strong>taskledger</strong>${nav}</header><main>${body}</main>
<script src="/admin/ledger/live.js" defer></script></body></html>`;
}

/** The region `live.js` refreshes from `src` (the same HTML, rendered again) without reloading the page. */
export function liveRegion(src: string, inner: string): string {
  return `<div id="live" data-src="${esc(src)}">${inner}</div>`;
}
