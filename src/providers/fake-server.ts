/**
 * The project's fake provider: a real HTTP server on 127.0.0.1 speaking the
 * REST shapes Octokit and Gitbeaker call, with injectable faults. Tests and
 * the demo point provider connections at it; nothing is mocked in-process.
 *
 * Contract:
 * - GitHub under `githubBaseUrl` (`<url>/github`): GET /repos/:o/:r/pulls/:n,
 *   GET and POST /repos/:o/:r/issues/:n/comments, DELETE
 *   /repos/:o/:r/issues/comments/:id. Auth: `Authorization: token|Bearer <t>`.
 * - GitLab under `gitlabBaseUrl` (`<url>/gitlab/api/v4`): GET
 *   /projects/:id/merge_requests/:iid, GET and POST .../notes, DELETE
 *   .../notes/:note_id; `:id` is the URL-encoded project path or its numeric
 *   ID. Auth: `PRIVATE-TOKEN: <t>` or `Authorization: Bearer <t>`.
 * - A token outside `tokens` gets 401; an unknown PR/MR/comment 404; a
 *   comment without a body 422 (GitHub) / 400 (GitLab).
 * - Lists are paginated (`page`, `per_page`, capped at `maxPageSize`) with a
 *   `Link: <...>; rel="next"` header (and GitLab's `x-*-page` headers).
 * - `injectFault` applies to the next `times` requests matching `method` and
 *   the `path` regex (tested against the URL path, prefix included): an HTTP
 *   status, `timeout` (never answers), `reset` (destroys the connection),
 *   or `timeout-after-write` (applies the request, then never answers).
 * - `requests` logs every request in arrival order.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export type FaultKind = number | 'timeout' | 'reset' | 'timeout-after-write';

export interface FaultSpec {
  method?: string;
  path: RegExp;
  fault: FaultKind;
  /** How many matching requests the fault applies to (default 1). */
  times?: number;
}

export interface RecordedRequest {
  method: string;
  /** Path and query as received. */
  path: string;
  outcome: number | 'timeout' | 'reset' | 'timeout-after-write';
}

export interface FakeComment {
  id: string;
  body: string;
}

export interface FakeProviderServer {
  url: string;
  githubBaseUrl: string;
  gitlabBaseUrl: string;
  addPullRequest(slug: string, number: number, state?: 'open' | 'closed' | 'merged'): void;
  addMergeRequest(projectPath: string, iid: number, state?: 'opened' | 'closed' | 'merged'): void;
  /** Changes a PR's or MR's state and keeps its comments (a merge or a close upstream). */
  setState(slug: string, number: number, state: 'open' | 'opened' | 'closed' | 'merged'): void;
  /** Seeds a comment (GitHub) or note (GitLab) written by someone else; returns its ID. */
  addComment(slug: string, number: number, body: string): string;
  /** Comments of a GitHub PR, else notes of a GitLab MR, ascending by ID. */
  comments(slug: string, number: number): FakeComment[];
  injectFault(spec: FaultSpec): void;
  clearFaults(): void;
  readonly requests: RecordedRequest[];
  close(): Promise<void>;
}

export interface FakeProviderOptions {
  port?: number;
  /** Accepted tokens. Default: the seed's `ghp_test` and `glpat-test`. */
  tokens?: string[];
  /** Largest page the server returns, whatever `per_page` asks (GitHub and GitLab: 100). */
  maxPageSize?: number;
}

export const DEFAULT_FAKE_TOKENS = ['ghp_test', 'glpat-test'];

interface Thread {
  state: string;
  comments: FakeComment[];
}

interface Reply {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}

const json = (status: number, body: unknown, headers: Record<string, string> = {}): Reply => ({
  status,
  body,
  headers,
});

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function parseCommentBody(raw: string): string | null {
  try {
    const parsed = JSON.parse(raw) as { body?: unknown };
    return typeof parsed.body === 'string' && parsed.body.length > 0 ? parsed.body : null;
  } catch {
    return null;
  }
}

export async function startFakeProviderServer(options: FakeProviderOptions = {}): Promise<FakeProviderServer> {
  const tokens = new Set(options.tokens ?? DEFAULT_FAKE_TOKENS);
  const maxPageSize = options.maxPageSize ?? 100;
  const github = new Map<string, Map<number, Thread>>();
  const gitlab = new Map<string, { id: number; mrs: Map<number, Thread> }>();
  const faults: (FaultSpec & { left: number })[] = [];
  const requests: RecordedRequest[] = [];
  let nextId = 1000;
  let origin = '';

  const ghThread = (slug: string, n: number) => github.get(slug)?.get(n);
  const glProject = (idOrPath: string) => {
    const byPath = gitlab.get(idOrPath);
    if (byPath) return byPath;
    return [...gitlab.values()].find((p) => String(p.id) === idOrPath);
  };

  function page(items: FakeComment[], url: URL, defaultSize: number, render: (c: FakeComment) => unknown): Reply {
    const perPage = Math.min(maxPageSize, Math.max(1, Number(url.searchParams.get('per_page')) || defaultSize));
    const pageNo = Math.max(1, Number(url.searchParams.get('page')) || 1);
    const total = items.length;
    const pages = Math.max(1, Math.ceil(total / perPage));
    const slice = items.slice((pageNo - 1) * perPage, pageNo * perPage);
    const headers: Record<string, string> = {
      'x-page': String(pageNo),
      'x-per-page': String(perPage),
      'x-total': String(total),
      'x-total-pages': String(pages),
      'x-next-page': pageNo < pages ? String(pageNo + 1) : '',
    };
    if (pageNo < pages) {
      const next = new URL(url.pathname, origin);
      next.searchParams.set('per_page', String(perPage));
      next.searchParams.set('page', String(pageNo + 1));
      headers.link = `<${next.toString()}>; rel="next"`;
    }
    return json(200, slice.map(render), headers);
  }

  function githubRoute(method: string, seg: string[], url: URL, raw: string, auth: string | undefined): Reply {
    const token = /^(?:token|bearer)\s+(.+)$/i.exec(auth ?? '')?.[1];
    if (!token || !tokens.has(token)) return json(401, { message: 'Bad credentials' });
    const notFound = json(404, { message: 'Not Found' });
    if (seg[0] !== 'repos' || seg.length < 5) return notFound;
    const slug = `${seg[1]}/${seg[2]}`;
    const renderComment = (c: FakeComment) => ({
      id: Number(c.id),
      body: c.body,
      user: { login: 'taskledger' },
      html_url: `https://github.test/${slug}/issues#issuecomment-${c.id}`,
    });
    if (method === 'GET' && seg[3] === 'pulls' && seg.length === 5) {
      const n = Number(seg[4]);
      const t = ghThread(slug, n);
      if (!t) return notFound;
      return json(200, {
        id: n + 500_000,
        number: n,
        state: t.state === 'merged' ? 'closed' : t.state,
        merged: t.state === 'merged',
        html_url: `https://github.test/${slug}/pull/${n}`,
        title: `PR ${n}`,
      });
    }
    if (seg[3] === 'issues' && seg[4] === 'comments' && seg.length === 6 && method === 'DELETE') {
      for (const t of github.get(slug)?.values() ?? []) {
        const i = t.comments.findIndex((c) => c.id === seg[5]);
        if (i >= 0) {
          t.comments.splice(i, 1);
          return { status: 204 };
        }
      }
      return notFound;
    }
    if (seg[3] === 'issues' && seg[5] === 'comments' && seg.length === 6) {
      const t = ghThread(slug, Number(seg[4]));
      if (!t) return notFound;
      if (method === 'GET') return page(t.comments, url, 30, renderComment);
      if (method === 'POST') {
        const body = parseCommentBody(raw);
        if (body === null) return json(422, { message: 'Validation Failed' });
        const c = { id: String(nextId++), body };
        t.comments.push(c);
        return json(201, renderComment(c));
      }
    }
    return notFound;
  }

  function gitlabRoute(method: string, seg: string[], url: URL, raw: string, req: IncomingMessage): Reply {
    const bearer = /^bearer\s+(.+)$/i.exec(req.headers.authorization ?? '')?.[1];
    const token = (req.headers['private-token'] as string | undefined) ?? bearer;
    if (!token || !tokens.has(token)) return json(401, { message: '401 Unauthorized' });
    const notFound = json(404, { message: '404 Not found' });
    if (seg[0] !== 'projects' || seg[2] !== 'merge_requests' || seg.length < 4) return notFound;
    const project = glProject(seg[1]!);
    const iid = Number(seg[3]);
    const t = project?.mrs.get(iid);
    if (!project || !t) return notFound;
    const renderNote = (c: FakeComment) => ({
      id: Number(c.id),
      body: c.body,
      author: { username: 'taskledger' },
      system: false,
      noteable_type: 'MergeRequest',
      noteable_iid: iid,
    });
    if (seg.length === 4 && method === 'GET') {
      const path = [...gitlab.entries()].find(([, p]) => p === project)![0];
      return json(200, {
        id: iid + 700_000,
        iid,
        project_id: project.id,
        state: t.state,
        web_url: `https://gitlab.test/${path}/-/merge_requests/${iid}`,
        title: `MR ${iid}`,
      });
    }
    if (seg[4] !== 'notes') return notFound;
    if (seg.length === 5 && method === 'GET') return page(t.comments, url, 20, renderNote);
    if (seg.length === 5 && method === 'POST') {
      const body = parseCommentBody(raw);
      if (body === null) return json(400, { message: '400 Bad request - body is missing' });
      const c = { id: String(nextId++), body };
      t.comments.push(c);
      return json(201, renderNote(c));
    }
    if (seg.length === 6 && method === 'DELETE') {
      const i = t.comments.findIndex((c) => c.id === seg[5]);
      if (i < 0) return notFound;
      t.comments.splice(i, 1);
      return { status: 204 };
    }
    return notFound;
  }

  function route(req: IncomingMessage, url: URL, raw: string): Reply {
    const method = req.method ?? 'GET';
    const segments = (prefix: string) =>
      url.pathname
        .slice(prefix.length)
        .split('/')
        .filter((s) => s.length > 0)
        .map((s) => decodeURIComponent(s));
    if (url.pathname.startsWith('/github/')) {
      return githubRoute(method, segments('/github/'), url, raw, req.headers.authorization);
    }
    if (url.pathname.startsWith('/gitlab/api/v4/')) {
      return gitlabRoute(method, segments('/gitlab/api/v4/'), url, raw, req);
    }
    return json(404, { message: 'Not Found' });
  }

  function takeFault(method: string, path: string): FaultKind | null {
    const f = faults.find((x) => x.left > 0 && (!x.method || x.method === method) && x.path.test(path));
    if (!f) return null;
    f.left -= 1;
    return f.fault;
  }

  function send(res: ServerResponse, reply: Reply): void {
    const headers = { ...reply.headers };
    if (reply.body === undefined) {
      res.writeHead(reply.status, headers).end();
      return;
    }
    res.writeHead(reply.status, { 'content-type': 'application/json; charset=utf-8', ...headers });
    res.end(JSON.stringify(reply.body));
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', origin);
    const method = req.method ?? 'GET';
    const raw = await readBody(req);
    const fault = takeFault(method, url.pathname);
    const entry: RecordedRequest = { method, path: `${url.pathname}${url.search}`, outcome: 0 };
    requests.push(entry);
    if (fault === 'reset') {
      entry.outcome = 'reset';
      req.socket.destroy();
      return;
    }
    if (fault === 'timeout') {
      entry.outcome = 'timeout';
      return; // never answers; close() drops the connection
    }
    if (typeof fault === 'number') {
      entry.outcome = fault;
      send(res, json(fault, { message: `injected fault ${fault}` }));
      return;
    }
    const reply = route(req, url, raw);
    if (fault === 'timeout-after-write') {
      entry.outcome = 'timeout-after-write';
      return; // applied, never answered
    }
    entry.outcome = reply.status;
    send(res, reply);
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      if (!res.headersSent) send(res, json(500, { message: String(err) }));
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, '127.0.0.1', () => resolve());
  });
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  return {
    url: origin,
    githubBaseUrl: `${origin}/github`,
    gitlabBaseUrl: `${origin}/gitlab/api/v4`,
    requests,
    addPullRequest(slug, number, state = 'open') {
      if (!github.has(slug)) github.set(slug, new Map());
      github.get(slug)!.set(number, { state, comments: [] });
    },
    addMergeRequest(projectPath, iid, state = 'opened') {
      if (!gitlab.has(projectPath)) gitlab.set(projectPath, { id: gitlab.size + 1, mrs: new Map() });
      gitlab.get(projectPath)!.mrs.set(iid, { state, comments: [] });
    },
    setState(slug, number, state) {
      const t = ghThread(slug, number) ?? gitlab.get(slug)?.mrs.get(number);
      if (!t) throw new Error(`fake provider: no PR/MR ${slug}#${number}`);
      t.state = state;
    },
    addComment(slug, number, body) {
      const t = ghThread(slug, number) ?? gitlab.get(slug)?.mrs.get(number);
      if (!t) throw new Error(`fake provider: no PR/MR ${slug}#${number}`);
      const c = { id: String(nextId++), body };
      t.comments.push(c);
      return c.id;
    },
    comments(slug, number) {
      const t = ghThread(slug, number) ?? gitlab.get(slug)?.mrs.get(number);
      return (t?.comments ?? []).map((c) => ({ ...c }));
    },
    injectFault(spec) {
      faults.push({ ...spec, left: spec.times ?? 1 });
    },
    clearFaults() {
      faults.length = 0;
    },
    close() {
      return new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        server.closeAllConnections();
      });
    },
  };
}
