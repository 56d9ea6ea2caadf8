/**
 * Database URLs carry passwords. Anything the CLI prints about a URL goes
 * through here first: the URL with its password replaced by `***`, and driver
 * messages with any copy of the password removed.
 */

/** The password in `scheme://user:password@host/...`, or null. Works on URLs `new URL` rejects. */
function passwordOf(url: string): string | null {
  const start = url.indexOf('://');
  if (start < 0) return null;
  const rest = url.slice(start + 3);
  const authority = rest.slice(0, rest.search(/[/?#]|$/));
  const at = authority.lastIndexOf('@');
  if (at < 0) return null;
  const userinfo = authority.slice(0, at);
  const colon = userinfo.indexOf(':');
  return colon < 0 ? null : userinfo.slice(colon + 1);
}

/** `postgres://app:s3cret@db/x` -> `postgres://app:***@db/x`; URLs without a password are unchanged. */
export function redactUrl(url: string): string {
  const password = passwordOf(url);
  if (password === null) return url;
  const start = url.indexOf('://') + 3;
  const at = url.indexOf(`:${password}@`, start);
  return `${url.slice(0, at)}:***${url.slice(at + password.length + 1)}`;
}

/** Removes the URL's password (raw and percent-decoded) from a message. */
export function scrubPassword(text: string, url: string): string {
  const password = passwordOf(url);
  if (!password) return text;
  let decoded = password;
  try {
    decoded = decodeURIComponent(password);
  } catch {
    // A malformed escape: only the raw form can appear.
  }
  return text.replaceAll(password, '***').replaceAll(decoded, '***');
}
