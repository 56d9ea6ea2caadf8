/**
 * Resolves a branch or ref of a local Git repository to its full commit ID,
 * with the Git CLI. Runs outside any SQL transaction (it is I/O).
 * `GitError.reason`: not_a_repository, unknown_ref, or git_failed (the
 * command was lost or answered something that is not a commit ID).
 */
import { runCommand } from '../launch/shared-spawner';
import type { RunRequest } from '../launch/spawner';
import { branchCommitFromFiles } from './files';

/** Why 10 s: rev-parse on a local repository takes milliseconds; a hung
 *  filesystem must not hold a create request forever. */
const GIT_TIMEOUT_MS = 10_000;

export class GitError extends Error {
  constructor(
    message: string,
    readonly reason: 'not_a_repository' | 'unknown_ref' | 'git_failed',
  ) {
    super(message);
    this.name = 'GitError';
  }
}

const git = (args: string[]): RunRequest => ({
  file: 'git',
  args,
  env: { LC_ALL: 'C', GIT_TERMINAL_PROMPT: '0' },
  timeoutMs: GIT_TIMEOUT_MS,
  maxBuffer: 1024 * 1024,
});

/**
 * A plain branch whose loose ref names a loose commit is read from Git's files (`branchCommitFromFiles`,
 * ADR 0037: the names Git would try first proven absent); anything else is one `rev-parse --verify` (from
 * the process's small helper, so the API process never forks its heap); only when it fails, a second asks
 * whether `repoPath` is a repository at all, for the precise error.
 */
export async function resolveCommit(repoPath: string, ref: string): Promise<string> {
  const fromFiles = branchCommitFromFiles(repoPath, ref);
  if (fromFiles !== null) return fromFiles;
  const verified = await runCommand(
    git(['-C', repoPath, 'rev-parse', '--verify', '--quiet', '--end-of-options', `${ref}^{commit}`]),
  ).catch((err: Error) => {
    throw new GitError(`git rev-parse in ${repoPath} was lost: ${err.message}`, 'git_failed');
  });
  if (verified.exitCode === 0) {
    const commit = verified.stdout.trim();
    if (!/^[0-9a-f]{40}([0-9a-f]{24})?$/.test(commit)) {
      throw new GitError(`unexpected rev-parse output for ${ref}`, 'git_failed');
    }
    return commit;
  }
  const inside = await runCommand(git(['-C', repoPath, 'rev-parse', '--is-inside-work-tree', '--git-dir'])).catch(
    () => null,
  );
  if (inside === null || inside.exitCode !== 0 || inside.stdout.trim() === '') {
    throw new GitError(`${repoPath} is not a Git repository`, 'not_a_repository');
  }
  throw new GitError(`branch or ref "${ref}" does not exist in ${repoPath}`, 'unknown_ref');
}
