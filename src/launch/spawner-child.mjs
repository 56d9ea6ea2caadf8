/**
 * The agent spawner's child process (src/launch/spawner.ts): a small Node
 * process, with no application code loaded, that starts agents for a worker.
 * Forking is cheap from here; from a worker it copies the page tables of a
 * heap of 100+ MB for every agent (a fifth of a worker's CPU in the bench).
 *
 * Protocol over the IPC channel:
 *   request  {id, cmd, args, cwd, env, logPath, exitPath}
 *   reply    {id, ok: true, pid} once the OS started the process ('spawn'),
 *            {id, ok: false, code, message} when it refused ('error': ENOENT,
 *            EACCES, ...) — proven not started.
 * The agent runs detached (its own process group), its stdout and stderr
 * appended to `logPath`, with `env` over this process's environment (the
 * worker's, inherited). Its exit is written to `exitPath` (`{code, pid,
 * signal}`, keys sorted, written to a temporary file and renamed) — best
 * effort, as in the worker before: recovery copes without it.
 *
 * It also runs short commands for the worker (Git, for the step effects):
 *   request  {id, run: {file, args, env, input, timeoutMs, maxBuffer}}
 *   reply    {id, ok: true, result: {stdout, stderr, exitCode, errorCode,
 *            signal, killed, message}} once the command ended, whatever its
 *            status (exitCode 0 is success; errorCode is a spawn error such as
 *            ENOENT; killed/signal mean its timeout or a signal ended it).
 *
 * When the worker goes away (the channel disconnects), nothing new starts;
 * the process stays until the agents it watches have exited, then leaves.
 * Plain JavaScript on purpose: it must start without the TypeScript loader.
 */
import { execFile, spawn } from 'node:child_process';
import { closeSync, openSync, renameSync, writeFileSync } from 'node:fs';

let watching = 0;
let connected = true;

function maybeLeave() {
  if (!connected && watching === 0) process.exit(0);
}

function recordExit(path, pid, code, signal) {
  try {
    const tmp = `${path}.${process.pid}.tmp`;
    writeFileSync(tmp, JSON.stringify({ code: code ?? null, pid: pid ?? null, signal: signal ?? null }));
    renameSync(tmp, path);
  } catch {
    // Best effort: recovery then needs a live process to prove the runtime.
  }
}

function start(req) {
  let fd;
  try {
    fd = openSync(req.logPath, 'a');
  } catch (err) {
    process.send({ id: req.id, ok: false, code: err.code || 'EIO', message: `log file: ${err.message}` });
    return;
  }
  let child;
  try {
    child = spawn(req.cmd, req.args, {
      cwd: req.cwd,
      env: { ...process.env, ...req.env },
      detached: true,
      stdio: ['ignore', fd, fd],
    });
  } catch (err) {
    closeSync(fd);
    process.send({ id: req.id, ok: false, code: err.code || 'EINVAL', message: err.message });
    return;
  }
  child.once('spawn', () => {
    closeSync(fd);
    watching++;
    process.send({ id: req.id, ok: true, pid: child.pid });
  });
  child.once('error', (err) => {
    // Before 'spawn': the OS refused it. After: an error of a running child (not a start failure).
    if (child.pid === undefined) {
      closeSync(fd);
      process.send({ id: req.id, ok: false, code: err.code || 'EIO', message: err.message });
    }
  });
  child.once('exit', (code, signal) => {
    recordExit(req.exitPath, child.pid, code, signal);
    watching--;
    maybeLeave();
  });
}

function reply(message) {
  if (process.connected) process.send(message);
}

function run(id, cmd) {
  const child = execFile(
    cmd.file,
    cmd.args,
    {
      env: { ...process.env, ...cmd.env },
      timeout: cmd.timeoutMs,
      maxBuffer: cmd.maxBuffer,
      killSignal: 'SIGKILL',
    },
    (err, stdout, stderr) => {
      const result = {
        stdout: String(stdout),
        stderr: String(stderr),
        exitCode: err ? (typeof err.code === 'number' ? err.code : null) : 0,
        errorCode: err && typeof err.code === 'string' ? err.code : null,
        signal: err?.signal ?? null,
        killed: err?.killed === true,
        message: err ? err.message : null,
      };
      reply({ id, ok: true, result });
    },
  );
  // No input: stdin ends at once, so a command that reads it does not wait for its timeout.
  child.stdin?.on('error', () => undefined);
  child.stdin?.end(typeof cmd.input === 'string' ? cmd.input : undefined);
}

process.on('message', (req) => {
  if (!req || typeof req !== 'object' || typeof req.id !== 'number') return;
  if (req.run && typeof req.run === 'object') run(req.id, req.run);
  else start(req);
});
process.on('disconnect', () => {
  connected = false;
  maybeLeave();
});
