/*
 * The native agent spawner (src/launch/native-spawner.ts drives it): the same
 * service as src/launch/spawner-child.mjs, from a process of a few hundred
 * kilobytes that starts children with posix_spawn (glibc: clone with
 * CLONE_VM|CLONE_VFORK, no page tables copied). Starting a process from a
 * Node helper costs ~7 ms of machine CPU on a small VM (a fork of a 40 MB
 * process); from here it costs what the child's own exec costs (~1.8 ms).
 * Why a C helper and not a library: docs/adr/0027-native-spawner.md.
 *
 * Protocol: requests on stdin, replies on stdout, each a frame: a 4-byte
 * little-endian length, then that many bytes of fields, each a 4-byte
 * little-endian length and its bytes.
 *   start  S id cmd cwd logPath exitPath argc arg... envc env...
 *          -> P id pid                 once the OS started the agent
 *          -> E id code message        the OS refused it (proven not started)
 *   run    R id file timeoutMs maxBuffer hasInput input argc arg... envc env...
 *          -> R id exitCode errorCode signal killed stdout stderr
 *             (once it exited and closed its output; "" is null; killed 0/1)
 * An agent runs in its own session, stdin /dev/null, stdout and stderr
 * appended to logPath, in cwd, with exactly the environment given; its exit
 * is written to exitPath as {"code":N,"pid":N,"signal":S} (a temporary file,
 * renamed), best effort. A command runs with the given environment, its
 * stdin /dev/null or the input, its output captured; past timeoutMs or
 * maxBuffer bytes on either stream it is killed (SIGKILL).
 * When stdin ends (the worker went away), nothing new starts; the process
 * leaves once the agents it watches and the commands it runs have ended.
 * `spawner-native --check` prints "ok" and exits: the build's smoke test.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_FIELDS 100000

typedef struct {
  char *data;
  size_t len, cap;
} buf_t;

typedef struct {
  pid_t pid;
  char *exit_path;
} agent_t;

typedef struct {
  pid_t pid;
  char *id;
  int out_fd, err_fd, in_fd;
  buf_t out, err;
  char *input;
  size_t input_len, input_off;
  long long deadline_ms;
  size_t max_buffer;
  int exited, status, killed, overflow;
} run_t;

static agent_t *agents;
static size_t n_agents, cap_agents;
static run_t **runs;
static size_t n_runs, cap_runs;
static int sig_pipe[2];
static int stdin_open = 1;
static buf_t inbuf;

static void die(const char *what) {
  fprintf(stderr, "spawner-native: %s: %s\n", what, strerror(errno));
  exit(2);
}

static void *xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) die("out of memory");
  return q;
}

static void buf_add(buf_t *b, const void *p, size_t n) {
  if (b->len + n > b->cap) {
    b->cap = (b->len + n) * 2 + 64;
    b->data = xrealloc(b->data, b->cap);
  }
  memcpy(b->data + b->len, p, n);
  b->len += n;
}

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static const char *errno_name(int e) {
  switch (e) {
#define N(x) \
  case x:    \
    return #x;
    N(ENOENT) N(EACCES) N(ENOEXEC) N(ENOTDIR) N(EPERM) N(E2BIG) N(ENOMEM) N(EMFILE) N(ENFILE) N(EAGAIN) N(ELOOP)
        N(ENAMETOOLONG) N(ETXTBSY) N(EIO) N(EISDIR) N(EINVAL) N(ENOSPC) N(EROFS) N(EFAULT) N(ENXIO) N(ENODEV)
#undef N
    default:
      return "UNKNOWN";
  }
}

static const char *signal_name(int s) {
  switch (s) {
#define N(x) \
  case x:    \
    return #x;
    N(SIGHUP) N(SIGINT) N(SIGQUIT) N(SIGILL) N(SIGTRAP) N(SIGABRT) N(SIGBUS) N(SIGFPE) N(SIGKILL) N(SIGUSR1)
        N(SIGSEGV) N(SIGUSR2) N(SIGPIPE) N(SIGALRM) N(SIGTERM) N(SIGCHLD) N(SIGCONT) N(SIGSTOP) N(SIGTSTP)
            N(SIGTTIN) N(SIGTTOU) N(SIGURG) N(SIGXCPU) N(SIGXFSZ) N(SIGVTALRM) N(SIGPROF) N(SIGWINCH) N(SIGSYS)
#undef N
    default:
      return "SIGUNKNOWN";
  }
}

/* --- replies ------------------------------------------------------------ */

static void put_field(buf_t *b, const char *p, size_t n) {
  uint8_t h[4] = {n & 0xff, (n >> 8) & 0xff, (n >> 16) & 0xff, (n >> 24) & 0xff};
  buf_add(b, h, 4);
  buf_add(b, p, n);
}

static void put_str(buf_t *b, const char *s) { put_field(b, s, strlen(s)); }

static void send_frame(buf_t *body) {
  uint8_t h[4] = {body->len & 0xff, (body->len >> 8) & 0xff, (body->len >> 16) & 0xff, (body->len >> 24) & 0xff};
  buf_t f = {0};
  buf_add(&f, h, 4);
  buf_add(&f, body->data, body->len);
  size_t off = 0;
  while (off < f.len) {
    ssize_t w = write(1, f.data + off, f.len - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      break; /* The worker went away: nobody to answer. */
    }
    off += (size_t)w;
  }
  free(f.data);
  free(body->data);
}

static void reply_refused(const char *id, int e, const char *message) {
  buf_t b = {0};
  put_str(&b, "E");
  put_str(&b, id);
  put_str(&b, errno_name(e));
  put_str(&b, message);
  send_frame(&b);
}

/* --- children ----------------------------------------------------------- */

static void on_sigchld(int sig) {
  (void)sig;
  int saved = errno;
  if (write(sig_pipe[1], "x", 1) < 0) { /* Full: a wake-up is already pending. */
  }
  errno = saved;
}

static int spawn_child(pid_t *pid, const char *file, posix_spawn_file_actions_t *fa, short flags, char **argv,
                       char **envp) {
  posix_spawnattr_t at;
  sigset_t all, none;
  posix_spawnattr_init(&at);
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&at, &all);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setflags(&at, flags | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  int rc = posix_spawnp(pid, file, fa, &at, argv, envp);
  posix_spawnattr_destroy(&at);
  return rc;
}

static void write_exit_record(const char *path, pid_t pid, int status) {
  char tmp[4096], doc[256];
  if (snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid()) >= (int)sizeof tmp) return;
  if (WIFEXITED(status))
    snprintf(doc, sizeof doc, "{\"code\":%d,\"pid\":%d,\"signal\":null}", WEXITSTATUS(status), (int)pid);
  else
    snprintf(doc, sizeof doc, "{\"code\":null,\"pid\":%d,\"signal\":\"%s\"}", (int)pid,
             signal_name(WTERMSIG(status)));
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return; /* Best effort: recovery then needs a live process to prove the runtime. */
  size_t n = strlen(doc);
  int ok = write(fd, doc, n) == (ssize_t)n;
  close(fd);
  if (!ok || rename(tmp, path) != 0) unlink(tmp);
}

static void reap(void) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    for (size_t i = 0; i < n_agents; i++) {
      if (agents[i].pid != pid) continue;
      write_exit_record(agents[i].exit_path, pid, status);
      free(agents[i].exit_path);
      agents[i] = agents[--n_agents];
      break;
    }
    for (size_t i = 0; i < n_runs; i++) {
      if (runs[i]->pid != pid) continue;
      runs[i]->exited = 1;
      runs[i]->status = status;
      break;
    }
  }
}

/* --- requests ----------------------------------------------------------- */

typedef struct {
  char **v;
  size_t *l;
  size_t n;
} fields_t;

/* argc, then that many values, from f->v[*at]; NULL-terminated copy of pointers, or NULL when malformed. */
static char **list_at(fields_t *f, size_t *at) {
  if (*at >= f->n) return NULL;
  long n = strtol(f->v[(*at)++], NULL, 10);
  if (n < 0 || (size_t)n > f->n - *at) return NULL;
  char **out = xrealloc(NULL, sizeof(char *) * ((size_t)n + 1));
  for (long i = 0; i < n; i++) out[i] = f->v[(*at)++];
  out[n] = NULL;
  return out;
}

static void start_agent(fields_t *f) {
  /* S id cmd cwd logPath exitPath argc arg... envc env... */
  if (f->n < 7) return;
  const char *id = f->v[1], *cmd = f->v[2], *cwd = f->v[3], *log_path = f->v[4], *exit_path = f->v[5];
  size_t at = 6;
  char **args = list_at(f, &at), **env = args ? list_at(f, &at) : NULL;
  if (!args || !env) {
    free(args);
    reply_refused(id, EINVAL, "malformed start request");
    return;
  }
  char **argv = xrealloc(NULL, sizeof(char *) * (at + 2));
  size_t k = 0;
  argv[k++] = (char *)cmd;
  for (char **a = args; *a; a++) argv[k++] = *a;
  argv[k] = NULL;

  char message[4600];
  int fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) {
    int e = errno;
    snprintf(message, sizeof message, "log file: %s, open '%.4000s'", strerror(e), log_path);
    reply_refused(id, e, message);
  } else {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fd, 1);
    posix_spawn_file_actions_adddup2(&fa, fd, 2);
    posix_spawn_file_actions_addchdir_np(&fa, cwd);
    pid_t pid;
    int rc = spawn_child(&pid, cmd, &fa, POSIX_SPAWN_SETSID, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    close(fd);
    if (rc != 0) {
      snprintf(message, sizeof message, "spawn %.4000s %s", cmd, errno_name(rc));
      reply_refused(id, rc, message);
    } else {
      if (n_agents == cap_agents) {
        cap_agents = cap_agents * 2 + 16;
        agents = xrealloc(agents, sizeof(agent_t) * cap_agents);
      }
      agents[n_agents].pid = pid;
      agents[n_agents].exit_path = strdup(exit_path);
      n_agents++;
      char pid_s[32];
      snprintf(pid_s, sizeof pid_s, "%d", (int)pid);
      buf_t b = {0};
      put_str(&b, "P");
      put_str(&b, id);
      put_str(&b, pid_s);
      send_frame(&b);
    }
  }
  free(argv);
  free(args);
  free(env);
}

static void reply_run(run_t *r, const char *error_code) {
  char code[32] = "", sig[32] = "";
  /* Past maxBuffer, as execFile: that error, no exit code, whenever the command ended. */
  if (r->overflow) error_code = "ERR_CHILD_PROCESS_STDIO_MAXBUFFER";
  if (r->exited && WIFEXITED(r->status) && !error_code) snprintf(code, sizeof code, "%d", WEXITSTATUS(r->status));
  if (r->exited && WIFSIGNALED(r->status)) snprintf(sig, sizeof sig, "%s", signal_name(WTERMSIG(r->status)));
  buf_t b = {0};
  put_str(&b, "R");
  put_str(&b, r->id);
  put_str(&b, code);
  put_str(&b, error_code ? error_code : "");
  put_str(&b, sig);
  put_str(&b, r->killed ? "1" : "0");
  put_field(&b, r->out.data ? r->out.data : "", r->out.len);
  put_field(&b, r->err.data ? r->err.data : "", r->err.len);
  send_frame(&b);
}

static void free_run(run_t *r) {
  free(r->id);
  free(r->out.data);
  free(r->err.data);
  free(r->input);
  free(r);
}

static void start_run(fields_t *f) {
  /* R id file timeoutMs maxBuffer hasInput input argc arg... envc env... */
  if (f->n < 9) return;
  run_t *r = xrealloc(NULL, sizeof *r);
  memset(r, 0, sizeof *r);
  r->id = strdup(f->v[1]);
  r->out_fd = r->err_fd = r->in_fd = -1;
  const char *file = f->v[2];
  long long timeout = strtoll(f->v[3], NULL, 10);
  r->deadline_ms = timeout > 0 ? now_ms() + timeout : 0;
  r->max_buffer = (size_t)strtoull(f->v[4], NULL, 10);
  int has_input = strcmp(f->v[5], "1") == 0;
  size_t at = 7;
  char **args = list_at(f, &at), **env = args ? list_at(f, &at) : NULL;
  if (!args || !env) {
    free(args);
    reply_run(r, "EINVAL");
    free_run(r);
    return;
  }
  char **argv = xrealloc(NULL, sizeof(char *) * (at + 2));
  size_t k = 0;
  argv[k++] = (char *)file;
  for (char **a = args; *a; a++) argv[k++] = *a;
  argv[k] = NULL;

  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  int ok = pipe2(out, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0 && (!has_input || pipe2(in, O_CLOEXEC) == 0);
  int rc = ok ? 0 : errno;
  if (ok) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (has_input)
      posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    else
      posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err[1], 2);
    rc = spawn_child(&r->pid, file, &fa, 0, argv, env);
    posix_spawn_file_actions_destroy(&fa);
  }
  int ends[] = {in[0], out[1], err[1]};
  for (int i = 0; i < 3; i++)
    if (ends[i] >= 0) close(ends[i]);
  free(argv);
  free(args);
  free(env);
  if (rc != 0) {
    int mine[] = {in[1], out[0], err[0]};
    for (int i = 0; i < 3; i++)
      if (mine[i] >= 0) close(mine[i]);
    reply_run(r, errno_name(rc));
    free_run(r);
    return;
  }
  r->out_fd = out[0];
  r->err_fd = err[0];
  fcntl(r->out_fd, F_SETFL, O_NONBLOCK);
  fcntl(r->err_fd, F_SETFL, O_NONBLOCK);
  if (has_input && f->l[6] > 0) {
    r->in_fd = in[1];
    fcntl(r->in_fd, F_SETFL, O_NONBLOCK);
    r->input_len = f->l[6];
    r->input = xrealloc(NULL, f->l[6]);
    memcpy(r->input, f->v[6], f->l[6]);
  } else if (has_input) {
    close(in[1]); /* Empty input: end of file at once. */
  }
  if (n_runs == cap_runs) {
    cap_runs = cap_runs * 2 + 16;
    runs = xrealloc(runs, sizeof(run_t *) * cap_runs);
  }
  runs[n_runs++] = r;
}

/* Parses one frame body into NUL-terminated fields (in place, shifted by one byte each). */
static int parse_fields(char *p, size_t len, fields_t *f) {
  size_t off = 0, cap = 16;
  f->n = 0;
  f->v = xrealloc(NULL, sizeof(char *) * cap);
  f->l = xrealloc(NULL, sizeof(size_t) * cap);
  while (off < len) {
    if (len - off < 4) return -1;
    uint8_t *h = (uint8_t *)p + off;
    size_t n = (size_t)h[0] | (size_t)h[1] << 8 | (size_t)h[2] << 16 | (size_t)h[3] << 24;
    if (n > len - off - 4 || f->n >= MAX_FIELDS) return -1;
    /* Move the value over its header's first byte so a NUL fits after it. */
    memmove(p + off, p + off + 4, n);
    p[off + n] = '\0';
    if (f->n == cap) {
      cap *= 2;
      f->v = xrealloc(f->v, sizeof(char *) * cap);
      f->l = xrealloc(f->l, sizeof(size_t) * cap);
    }
    f->l[f->n] = n;
    f->v[f->n++] = p + off;
    off += 4 + n;
  }
  return 0;
}

static void handle_input(void) {
  size_t off = 0;
  while (inbuf.len - off >= 4) {
    uint8_t *h = (uint8_t *)inbuf.data + off;
    size_t n = (size_t)h[0] | (size_t)h[1] << 8 | (size_t)h[2] << 16 | (size_t)h[3] << 24;
    if (inbuf.len - off - 4 < n) break;
    fields_t f = {0};
    if (parse_fields(inbuf.data + off + 4, n, &f) == 0 && f.n >= 2) {
      if (strcmp(f.v[0], "S") == 0) start_agent(&f);
      if (strcmp(f.v[0], "R") == 0) start_run(&f);
    }
    free(f.v);
    free(f.l);
    off += 4 + n;
  }
  memmove(inbuf.data, inbuf.data + off, inbuf.len - off);
  inbuf.len -= off;
}

/* --- the loop ----------------------------------------------------------- */

static void drain(run_t *r, int *fd, buf_t *b) {
  char chunk[65536];
  for (;;) {
    ssize_t n = read(*fd, chunk, sizeof chunk);
    if (n > 0) {
      if (!r->overflow) buf_add(b, chunk, (size_t)n);
      if (b->len > r->max_buffer && !r->overflow) {
        r->overflow = 1;
        b->len = r->max_buffer;
        if (!r->exited) {
          kill(r->pid, SIGKILL);
          r->killed = 1;
        }
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    close(*fd);
    *fd = -1;
    return;
  }
}

static void feed(run_t *r) {
  while (r->input_off < r->input_len) {
    ssize_t w = write(r->in_fd, r->input + r->input_off, r->input_len - r->input_off);
    if (w > 0) {
      r->input_off += (size_t)w;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) return;
    break; /* EPIPE: it stopped reading; as execFile, that is not an error of ours. */
  }
  close(r->in_fd);
  r->in_fd = -1;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--check") == 0) {
    puts("ok");
    return 0;
  }
  if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) die("pipe");
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigchld;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, NULL);
  fcntl(0, F_SETFD, FD_CLOEXEC);
  fcntl(1, F_SETFD, FD_CLOEXEC);

  struct pollfd *pfd = NULL;
  size_t pfd_cap = 0;
  for (;;) {
    reap();
    long long now = now_ms(), wait = -1;
    for (size_t i = 0; i < n_runs;) {
      run_t *r = runs[i];
      if (!r->exited && r->deadline_ms && now >= r->deadline_ms && !r->killed) {
        kill(r->pid, SIGKILL);
        r->killed = 1;
      }
      if (r->exited && r->out_fd < 0 && r->err_fd < 0) {
        if (r->in_fd >= 0) close(r->in_fd);
        reply_run(r, NULL);
        free_run(r);
        runs[i] = runs[--n_runs];
        continue;
      }
      if (!r->exited && r->deadline_ms && !r->killed) {
        long long left = r->deadline_ms - now;
        if (wait < 0 || left < wait) wait = left;
      }
      i++;
    }
    if (!stdin_open && n_agents == 0 && n_runs == 0) return 0;

    size_t need = 2 + 3 * n_runs, k = 0;
    if (need > pfd_cap) pfd = xrealloc(pfd, sizeof(struct pollfd) * (pfd_cap = need * 2));
    pfd[k++] = (struct pollfd){.fd = sig_pipe[0], .events = POLLIN};
    pfd[k++] = (struct pollfd){.fd = stdin_open ? 0 : -1, .events = POLLIN};
    for (size_t i = 0; i < n_runs; i++) {
      pfd[k++] = (struct pollfd){.fd = runs[i]->out_fd, .events = POLLIN};
      pfd[k++] = (struct pollfd){.fd = runs[i]->err_fd, .events = POLLIN};
      pfd[k++] = (struct pollfd){.fd = runs[i]->in_fd, .events = POLLOUT};
    }
    if (poll(pfd, k, (int)wait) < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    if (pfd[0].revents) {
      char junk[256];
      while (read(sig_pipe[0], junk, sizeof junk) > 0) {
      }
    }
    /* Output before requests: the runs array may grow while requests are handled. */
    for (size_t i = 0; i < n_runs; i++) {
      run_t *r = runs[i];
      struct pollfd *p = pfd + 2 + 3 * i;
      if (r->out_fd >= 0 && p[0].revents) drain(r, &r->out_fd, &r->out);
      if (r->err_fd >= 0 && p[1].revents) drain(r, &r->err_fd, &r->err);
      if (r->in_fd >= 0 && p[2].revents) feed(r);
    }
    if (pfd[1].revents) {
      char chunk[65536];
      ssize_t n = read(0, chunk, sizeof chunk);
      if (n > 0) {
        buf_add(&inbuf, chunk, (size_t)n);
        handle_input();
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        stdin_open = 0;
      }
    }
  }
}
