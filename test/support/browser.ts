/**
 * A real headless Chromium for the ledger-view tests (playwright-core driving
 * Debian's `chromium`; `.ci/run` installs it when missing). Override the
 * binary with TASKLEDGER_CHROMIUM. One browser per test file; each test gets
 * a fresh context (no cookies shared between "browsers").
 */
import { existsSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';

export function chromiumPath(): string {
  const candidates = [process.env.TASKLEDGER_CHROMIUM, '/usr/bin/chromium', '/usr/bin/chromium-browser'];
  const found = candidates.find((p): p is string => typeof p === 'string' && p.length > 0 && existsSync(p));
  if (!found) throw new Error('no Chromium found: apt-get install chromium, or set TASKLEDGER_CHROMIUM');
  return found;
}

export function launchChromium(): Promise<Browser> {
  // --no-sandbox: CI runs as root in a container, where Chromium's sandbox cannot start.
  return chromium.launch({ executablePath: chromiumPath(), headless: true, args: ['--no-sandbox'] });
}
