/**
 * Resolves a branch or ref of a local Git repository to its full commit ID,
 * with the Git CLI. Runs outside any SQL transaction (it is I/O).
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

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

export async function resolveCommit(repoPath: string, ref: string): Promise<string> {
  try {
    const inside = await run('git', ['-C', repoPath, 'rev-parse', '--is-inside-work-tree', '--git-dir'], {
      timeout: GIT_TIMEOUT_MS,
    });
    if (!inside.stdout.trim()) throw new GitError(`${repoPath} is not a Git repository`, 'not_a_repository');
  } catch (err) {
    if (err instanceof GitError) throw err;
    throw new GitError(`${repoPath} is not a Git repository`, 'not_a_repository');
  }
  try {
    const { stdout } = await run(
      'git',
      ['-C', repoPath, 'rev-parse', '--verify', '--quiet', '--end-of-options', `${ref}^{commit}`],
      {
        timeout: GIT_TIMEOUT_MS,
      },
    );
    const commit = stdout.trim();
    if (!/^[0-9a-f]{40}([0-9a-f]{24})?$/.test(commit))
      throw new GitError(`unexpected rev-parse output for ${ref}`, 'git_failed');
    return commit;
  } catch (err) {
    if (err instanceof GitError) throw err;
    throw new GitError(`branch or ref "${ref}" does not exist in ${repoPath}`, 'unknown_ref');
  }
}
