import mysql from 'mysql2/promise';
const c = await mysql.createConnection({ host: '127.0.0.1', user: 'root', database: 'taskledger_bench' });
const [[w]] = await c.query('select id from workspaces limit 1');
const [[s]] = await c.query('select s.id sid, s.task_id tid, s.agent_profile_id ap from task_sessions s limit 1');
const q = (v) => `'${v}'`;
const variants = {
  pk: `SELECT state FROM workspaces WHERE id = ${q(w.id)}`,
  wfJoin: `SELECT s.id, s.workflow_id FROM workflow_steps s JOIN workflows w ON w.id = s.workflow_id WHERE s.workspace_id = ${q(w.id)} ORDER BY w.created_at, w.id, s.position LIMIT 1`,
  wfSub: `SELECT s.id, s.workflow_id FROM workflow_steps s WHERE s.workflow_id = (SELECT w.id FROM workflows w WHERE w.workspace_id = ${q(w.id)} AND EXISTS (SELECT 1 FROM workflow_steps x WHERE x.workflow_id = w.id AND x.workspace_id = ${q(w.id)}) ORDER BY w.created_at, w.id LIMIT 1) AND s.workspace_id = ${q(w.id)} ORDER BY s.position LIMIT 1`,
  specJoin: `SELECT (SELECT executor_json FROM agent_profiles WHERE id = ${q(s.ap)}) AS executor_json, (SELECT environment_id FROM task_sessions WHERE id = ${q(s.sid)}) AS environment_id, (SELECT r.worktree_path FROM task_environment_repos r JOIN task_environments e ON e.id = r.environment_id WHERE e.task_id = ${q(s.tid)} AND r.worktree_path IS NOT NULL ORDER BY r.id LIMIT 1) AS worktree_path`,
  specNoOrder: `SELECT (SELECT executor_json FROM agent_profiles WHERE id = ${q(s.ap)}) AS executor_json, (SELECT environment_id FROM task_sessions WHERE id = ${q(s.sid)}) AS environment_id, (SELECT MIN(r.worktree_path) FROM task_environment_repos r JOIN task_environments e ON e.id = r.environment_id WHERE e.task_id = ${q(s.tid)} AND r.worktree_path IS NOT NULL) AS worktree_path`,
  specNoWt: `SELECT (SELECT executor_json FROM agent_profiles WHERE id = ${q(s.ap)}) AS executor_json, (SELECT environment_id FROM task_sessions WHERE id = ${q(s.sid)}) AS environment_id`,
};
for (const [k, sql] of Object.entries(variants)) console.log(k, JSON.stringify((await c.query(sql))[0]).slice(0, 150));
for (let round = 0; round < 3; round++) for (const [k, sql] of Object.entries(variants)) {
  const t = process.hrtime.bigint(); for (let i = 0; i < 2000; i++) await c.query(sql);
  console.log(k, (Number(process.hrtime.bigint() - t) / 2000 / 1000).toFixed(1), 'us/query');
}
await c.end();
