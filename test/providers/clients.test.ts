/**
 * The GitHub (Octokit) and GitLab (Gitbeaker) clients against the fake
 * provider server over real HTTP: authenticated read, idempotent marker
 * comment (found, never posted twice, across pages), delete, and the mapping
 * of every fault to its ledger failure class — including the retry after a
 * write that timed out after it was applied.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startFakeProviderServer, type FakeProviderServer } from '../../src/providers/fake-server';
import { createProviderRegistry } from '../../src/providers/registry';
import { ProviderError, type ContributionRef } from '../../src/providers/types';

/** Short, so timeout cases stay fast; generous for a local server. */
const TIMEOUT_MS = 400;
const MARKER = 'a'.repeat(64);
const BODY = `Linked to taskledger task t-1 (marker ${MARKER})`;

let server: FakeProviderServer;
const registry = createProviderRegistry({ timeoutMs: TIMEOUT_MS });

beforeAll(async () => {
  // A page of two forces pagination with only a handful of comments.
  server = await startFakeProviderServer({ maxPageSize: 2 });
});

afterAll(async () => {
  await server.close();
});

beforeEach(() => {
  server.clearFaults();
});

interface Case {
  provider: 'github' | 'gitlab';
  slug: string;
  /** Path fragments the fault regexes match. */
  readPath: RegExp;
  listPath: RegExp;
  writePath: RegExp;
  setup(id: number): void;
  ref(id: number, overrides?: Partial<ContributionRef>): ContributionRef;
}

let counter = 1;
const nextId = () => counter++;

const CASES: Case[] = [
  {
    provider: 'github',
    slug: 'octo/widgets',
    readPath: /\/pulls\/\d+$/,
    listPath: /\/issues\/\d+\/comments$/,
    writePath: /\/issues\/\d+\/comments$/,
    setup: (id) => server.addPullRequest('octo/widgets', id),
    ref: (id, o = {}) => ({
      provider: 'github',
      baseUrl: server.githubBaseUrl,
      token: 'ghp_test',
      remoteSlug: 'octo/widgets',
      contributionKind: 'pull_request',
      contributionId: String(id),
      ...o,
    }),
  },
  {
    provider: 'gitlab',
    slug: 'group/sub/widgets',
    readPath: /\/merge_requests\/\d+$/,
    listPath: /\/notes$/,
    writePath: /\/notes$/,
    setup: (id) => server.addMergeRequest('group/sub/widgets', id),
    ref: (id, o = {}) => ({
      provider: 'gitlab',
      baseUrl: server.gitlabBaseUrl,
      token: 'glpat-test',
      remoteSlug: 'group/sub/widgets',
      contributionKind: 'merge_request',
      contributionId: String(id),
      ...o,
    }),
  },
];

/** A local URL nothing listens on: a port just released by a closed server. */
async function closedPortUrl(): Promise<string> {
  const probe = await startFakeProviderServer();
  await probe.close();
  return probe.url;
}

async function failureOf(p: Promise<unknown>): Promise<ProviderError> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ProviderError);
  return err as ProviderError;
}

describe.each(CASES)('$provider client', (c) => {
  const client = () => registry[c.provider];
  const fresh = () => {
    const id = nextId();
    c.setup(id);
    return { id, ref: c.ref(id) };
  };

  it('reads the contribution with the token, at the configured base URL', async () => {
    const { id, ref } = fresh();
    const info = await client().getContribution(ref);
    expect(info).toMatchObject({ id: String(id), state: c.provider === 'github' ? 'open' : 'opened' });
    expect(info.url).toContain(String(id));
    expect(info.responseSha256).toMatch(/^[0-9a-f]{64}$/);
    expect((await client().getContribution(ref)).responseSha256).toBe(info.responseSha256);
  });

  it('links idempotently: the second ensure finds the first comment across pages, one comment total', async () => {
    const { id, ref } = fresh();
    for (let i = 0; i < 3; i++) server.addComment(c.slug, id, `someone else ${i}`);
    const first = await client().ensureLinkComment(ref, MARKER, BODY);
    expect(first.created).toBe(true);
    server.addComment(c.slug, id, 'a later comment');
    const before = server.requests.length;
    const second = await client().ensureLinkComment(ref, MARKER, BODY);
    expect(second).toEqual({ ...first, created: false });
    expect(server.comments(c.slug, id).filter((x) => x.body.includes(MARKER))).toEqual([
      { id: first.handle, body: BODY },
    ]);
    const pages = server.requests.slice(before);
    expect(pages.length).toBeGreaterThanOrEqual(3); // 5 comments, 2 per page, no POST
    expect(pages.every((r) => r.method === 'GET')).toBe(true);
    expect(await client().findLinkComment(ref, 'b'.repeat(64))).toBeNull();
  });

  it('refuses a body that does not carry the marker (a retry could never find it)', async () => {
    const { ref } = fresh();
    await expect(client().ensureLinkComment(ref, MARKER, 'no marker here')).rejects.toThrow(/marker/);
  });

  it('deletes the marker comment by its handle', async () => {
    const { id, ref } = fresh();
    const link = await client().ensureLinkComment(ref, MARKER, BODY);
    await client().deleteLinkComment(ref, link.handle);
    expect(server.comments(c.slug, id)).toEqual([]);
    expect(await client().findLinkComment(ref, MARKER)).toBeNull();
    expect((await failureOf(client().deleteLinkComment(ref, link.handle))).status).toBe(404);
  });

  it('maps 401 (bad token) and 404 (unknown contribution) to permanent', async () => {
    const { ref } = fresh();
    const unauthorized = await failureOf(client().getContribution({ ...ref, token: 'revoked' }));
    expect(unauthorized).toMatchObject({ failureClass: 'permanent', status: 401 });
    const missing = await failureOf(client().getContribution(c.ref(999_999)));
    expect(missing).toMatchObject({ failureClass: 'permanent', status: 404 });
    const noThread = await failureOf(client().ensureLinkComment(c.ref(999_999), MARKER, BODY));
    expect(noThread).toMatchObject({ failureClass: 'permanent', status: 404 });
    expect(await failureOf(client().getContribution({ ...ref, contributionId: 'not-a-number' }))).toMatchObject({
      failureClass: 'permanent',
      status: null,
    });
  });

  it('maps 503, 429, a reset or a timeout on a read to transient', async () => {
    const { ref } = fresh();
    for (const fault of [503, 502, 429, 'reset', 'timeout'] as const) {
      server.injectFault({ method: 'GET', path: c.readPath, fault });
      const err = await failureOf(client().getContribution(ref));
      expect({ fault, failureClass: err.failureClass }).toEqual({ fault, failureClass: 'transient' });
    }
    server.injectFault({ method: 'GET', path: c.listPath, fault: 503 });
    expect((await failureOf(client().ensureLinkComment(ref, MARKER, BODY))).failureClass).toBe('transient');
    expect(server.comments(c.slug, Number(ref.contributionId))).toEqual([]);
  });

  it('maps connection refused to transient, and a port fetch never sends to (bad port) to permanent', async () => {
    const { ref } = fresh();
    const refused = await failureOf(client().getContribution({ ...ref, baseUrl: await closedPortUrl() }));
    expect(refused).toMatchObject({ failureClass: 'transient', status: null });
    expect(refused.message).toMatch(/connection refused/);
    const blocked = await failureOf(client().getContribution({ ...ref, baseUrl: 'http://127.0.0.1:1' }));
    expect(blocked).toMatchObject({ failureClass: 'permanent', status: null });
  });

  it('maps 5xx, a reset or a timeout on a write to ambiguous, and 422/403 on a write to permanent', async () => {
    const { id, ref } = fresh();
    for (const fault of [503, 500, 'reset', 'timeout'] as const) {
      server.injectFault({ method: 'POST', path: c.writePath, fault });
      const err = await failureOf(client().ensureLinkComment(ref, MARKER, BODY));
      expect({ fault, failureClass: err.failureClass }).toEqual({ fault, failureClass: 'ambiguous' });
    }
    for (const fault of [422, 403] as const) {
      server.injectFault({ method: 'POST', path: c.writePath, fault });
      expect(await failureOf(client().ensureLinkComment(ref, MARKER, BODY))).toMatchObject({
        failureClass: 'permanent',
        status: fault,
      });
    }
    expect(server.comments(c.slug, id)).toEqual([]);
    // None of those faults applied the write: the retry creates the one comment.
    expect((await client().ensureLinkComment(ref, MARKER, BODY)).created).toBe(true);
    expect(server.comments(c.slug, id)).toHaveLength(1);
  });

  it('timeout after the write applied: ambiguous, then the retry finds that comment and posts nothing', async () => {
    const { id, ref } = fresh();
    server.injectFault({ method: 'POST', path: c.writePath, fault: 'timeout-after-write' });
    expect((await failureOf(client().ensureLinkComment(ref, MARKER, BODY))).failureClass).toBe('ambiguous');
    const applied = server.comments(c.slug, id);
    expect(applied).toHaveLength(1);
    const posts = server.requests.filter((r) => r.method === 'POST').length;
    const retry = await client().ensureLinkComment(ref, MARKER, BODY);
    expect(retry).toMatchObject({ handle: applied[0]!.id, created: false });
    expect(server.requests.filter((r) => r.method === 'POST').length).toBe(posts);
    expect(server.comments(c.slug, id)).toHaveLength(1);
  });

  it('sends each request exactly once (no hidden client retries, even of a 502 write)', async () => {
    const { ref } = fresh();
    server.injectFault({ method: 'POST', path: c.writePath, fault: 502 });
    const before = server.requests.filter((r) => r.method === 'POST').length;
    expect((await failureOf(client().ensureLinkComment(ref, MARKER, BODY))).failureClass).toBe('ambiguous');
    expect(server.requests.filter((r) => r.method === 'POST').length).toBe(before + 1);
  });
});

describe('fake provider server', () => {
  it('addresses GitLab projects by URL-encoded path or numeric ID and checks PRIVATE-TOKEN', async () => {
    server.addMergeRequest('solo/project', 3);
    const ok = await fetch(`${server.gitlabBaseUrl}/projects/solo%2Fproject/merge_requests/3`, {
      headers: { 'private-token': 'glpat-test' },
    });
    expect(ok.status).toBe(200);
    const { project_id } = (await ok.json()) as { project_id: number };
    const byId = await fetch(`${server.gitlabBaseUrl}/projects/${project_id}/merge_requests/3`, {
      headers: { authorization: 'Bearer glpat-test' },
    });
    expect(byId.status).toBe(200);
    const denied = await fetch(`${server.gitlabBaseUrl}/projects/solo%2Fproject/merge_requests/3`);
    expect(denied.status).toBe(401);
  });

  it('checks the GitHub Authorization header and logs every request', async () => {
    server.addPullRequest('octo/log', 1);
    const before = server.requests.length;
    const denied = await fetch(`${server.githubBaseUrl}/repos/octo/log/pulls/1`, {
      headers: { authorization: 'token nope' },
    });
    expect(denied.status).toBe(401);
    expect(server.requests.slice(before)).toEqual([
      { method: 'GET', path: '/github/repos/octo/log/pulls/1', outcome: 401 },
    ]);
  });
});
