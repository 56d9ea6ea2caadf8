/**
 * Issuing API tokens. The token is 32 random bytes (base64url), shown once;
 * only its SHA-256 is stored. A `member` token is bound to the workspace it
 * was issued under; an `operator` token is stored with `workspace_id = NULL`
 * (docs/schema.md: valid for every workspace). One transaction: workspace
 * (tier 1, shared), then the token row.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { TIER } from '../db/lock-plan';
import { runTransaction, type Db } from '../db/tx';
import { tokenSha256 } from '../store/actor';
import { lockActiveWorkspaceLocked } from './workspaces';

export type TokenRole = 'member' | 'operator';

export interface IssuedToken {
  id: string;
  /** The bearer secret. Returned once; never stored. */
  token: string;
  principal_id: string;
  role: TokenRole;
  workspace_id: string | null;
}

export async function issueToken(
  db: Db,
  workspaceId: string,
  input: { principal_id: string; role?: TokenRole },
): Promise<IssuedToken> {
  const id = randomUUID();
  const token = randomBytes(32).toString('base64url');
  const role = input.role ?? 'member';
  const boundWorkspace = role === 'operator' ? null : workspaceId;
  await runTransaction(db, 'IssueToken', async (tx) => {
    await lockActiveWorkspaceLocked(tx, workspaceId);
    tx.lockRow(TIER.AUTHORITY, 'api_tokens', id);
    await tx.exec(
      `INSERT INTO api_tokens (id, workspace_id, principal_id, role, token_sha256, revision, created_at) VALUES (?, ?, ?, ?, ?, 1, ${tx.now})`,
      [id, boundWorkspace, input.principal_id, role, tokenSha256(token)],
    );
  });
  return { id, token, principal_id: input.principal_id, role, workspace_id: boundWorkspace };
}
