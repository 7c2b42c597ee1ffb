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
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile pid_t child = -1;

static void forward(int sig)
{
    (void)sig;
    if (child > 0)
        kill(child, SIGTERM);
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
    /* Block until the handlers are in place, so an early signal is not lost. */
    sigprocmask(SIG_BLOCK, &block, &old);
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
