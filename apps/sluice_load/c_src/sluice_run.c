/*
 * sluice-run: run a command as a child and forward SIGINT and SIGTERM to it
 * as SIGTERM; exit with the child's status (128+N if it died of signal N).
 *
 * Why: the Erlang VM keeps SIGINT for its break handler (a menu, or an abort
 * without cleanup) and os:set_signal/2 cannot take it over, so `bin/sluice
 * serve' runs the VM with +Bi (SIGINT ignored) under this launcher, which
 * turns both signals into the SIGTERM the VM drains on. A shell script
 * cannot do this job: a shell started in the background has SIGINT ignored
 * and may not trap it; a C program installs its handler regardless.
 *
 * If this launcher itself is killed with SIGKILL (`kill -9 $!' after
 * `bin/sluice serve ... &': $! is this process), the child gets SIGTERM
 * (PR_SET_PDEATHSIG) and drains and exits as on any SIGTERM; without it the
 * VM, and the peer nodes of `serve --nodes', went on serving the port with
 * no parent, and nothing but their own pids could stop them.
 *
 * A signal that comes before the VM can act on it is held, not forwarded:
 * in its first ~0.1 s the VM has no signal server (a SIGTERM is dropped:
 * `serve' then served on), then OTP's default handler (init:stop/0: no
 * drain, no report) until the command's own is in place. The child gets
 * the write end of a pipe, its number in SLUICE_READY_FD; sluice_cli
 * writes a byte to it once a SIGTERM it gets is kept for the command
 * (sluice_signal:hold/0), and only then is a held signal passed on. A
 * child that never says so (another program, a VM that hangs booting)
 * gets it anyway HOLD_MAX_MS after it came, or when the pipe closes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HOLD_MAX_MS 10000

static volatile pid_t child = -1;
/* Until the child is ready, a signal only sets `held'; both are read and
   written with the signals blocked but inside ppoll(), so no lock. */
static volatile sig_atomic_t ready = 0, held = 0;

static void forward(int sig)
{
    (void)sig;
    if (!ready)
        held = 1;
    else if (child > 0)
        kill(child, SIGTERM);
}

/* Only to wake ppoll() when the child ends before it is ready. */
static void child_ended(int sig)
{
    (void)sig;
}

static long long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Wait for the child's ready byte (or its end) with SIGINT, SIGTERM and
   SIGCHLD taken only inside ppoll(). Returns once the child is ready, has
   closed the pipe, or has had a held signal for HOLD_MAX_MS; the held
   signal, if any, is then passed on. */
static void wait_ready(int rd, pid_t pid, const sigset_t *open_mask)
{
    long long since = -1;
    while (!ready) {
        struct pollfd p = {.fd = rd, .events = POLLIN};
        struct timespec left, *timeout = NULL;
        if (held) {
            if (since < 0)
                since = now_ms();
            long long ms = since + HOLD_MAX_MS - now_ms();
            if (ms <= 0)
                break;
            left.tv_sec = ms / 1000;
            left.tv_nsec = (ms % 1000) * 1000000;
            timeout = &left;
        }
        int n = ppoll(&p, 1, timeout, open_mask);
        if (n > 0 || (n < 0 && errno != EINTR))
            break; /* the byte, or the pipe closed (no reader can be
                      interrupted here: the signals are blocked) */
        siginfo_t info = {0};
        /* Ended (left for the waitpid() after, which reaps it)? */
        if (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0
            && info.si_pid == pid)
            break;
    }
    ready = 1;
    close(rd);
    if (held)
        kill(pid, SIGTERM);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: sluice-run COMMAND [ARGS...]\n");
        return 2;
    }
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGCHLD);
    /* Block until the handlers are in place, so an early signal is not lost. */
    sigprocmask(SIG_BLOCK, &block, &old);
    int pipefd[2];
    /* Without the pipe a signal is forwarded at once, as before. */
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        pipefd[0] = pipefd[1] = -1;
        ready = 1;
    }
    pid_t self = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        perror("sluice-run: fork");
        return 1;
    }
    if (pid == 0) {
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        sigprocmask(SIG_SETMASK, &old, NULL);
        /* Kept across execve; the check covers a launcher that died
           before the prctl. */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != self)
            _exit(128 + SIGTERM);
        if (pipefd[1] >= 0) {
            char fd[16], run[24];
            snprintf(fd, sizeof fd, "%d", pipefd[1]);
            snprintf(run, sizeof run, "%ld", (long)self);
            /* the write end only, and across execve */
            if (fcntl(pipefd[1], F_SETFD, 0) == 0) {
                setenv("SLUICE_READY_FD", fd, 1);
                /* The parent-death SIGTERM can come before the VM takes
                   signals, and is lost then: the VM checks that its
                   parent is still this pid once it does. */
                setenv("SLUICE_RUN_PID", run, 1);
            }
        }
        execvp(argv[1], argv + 1);
        fprintf(stderr, "sluice-run: cannot run %s: %s\n", argv[1], strerror(errno));
        _exit(127);
    }
    child = pid;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = child_ended;
    sigaction(SIGCHLD, &sa, NULL);
    if (!ready) {
        close(pipefd[1]);
        sigset_t open_mask = old;
        sigdelset(&open_mask, SIGINT);
        sigdelset(&open_mask, SIGTERM);
        sigdelset(&open_mask, SIGCHLD);
        wait_ready(pipefd[0], pid, &open_mask);
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    int status;
    for (;;) {
        pid_t r = waitpid(pid, &status, 0);
        if (r == pid)
            break;
        if (r < 0 && errno != EINTR) {
            perror("sluice-run: waitpid");
            return 1;
        }
    }
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return 1;
}
