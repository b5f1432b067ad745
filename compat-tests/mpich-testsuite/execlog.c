/*
 * execlog.so: records which processes a test of MPICH's suite really started.
 *
 * suite.py LD_PRELOADs this library into runtests and everything it starts. At load time
 * (a constructor, before main) a process appends one line to $KAURI_SUITE_EXECLOG when it is
 * either
 *   - the launcher under test (its /proc/self/exe equals $KAURI_SUITE_LAUNCHER):
 *       L <pid> <unix time> <MPIEXEC_TIMEOUT or -> <cmdline, arguments separated by \x1f>
 *     and it exports KAURI_SUITE_JOB=<its pid> (unless already set: kauri's own agents keep
 *     the front end's), which every rank and every spawned process inherits. When it leaves
 *     through exit(3) or a return from main, an on_exit(3) handler appends
 *       E <pid> <unix time> <exit status>
 *     (nothing when a signal kills it or it calls _exit); or
 *   - a test program (its /proc/self/exe lies under $KAURI_SUITE_ROOT):
 *       P <pid> <ppid> <unix time> <KAURI_SUITE_JOB or -> <PMI_RANK or -> <exe> <cmdline> <env>
 *     where <env> is NAME=VALUE for each NAME of the comma-separated $KAURI_SUITE_ENVLOG that
 *     is set in the process, separated by \x1f (- when none is): whether a testlist's env=
 *     setting reached the ranks through the launcher.
 * Anything else (perl, sh, make, hydra_pmi_proxy) writes nothing. Lines are written with
 * one write(2) on an O_APPEND descriptor, so concurrent processes do not interleave.
 *
 * This is how the harness tells a spawn test that spawned from one that passed without
 * spawning (MPICH's tests skip MPI_Comm_spawn when MPI_UNIVERSE_SIZE <= the world size),
 * and how it finds a launcher that outlives its MPIEXEC_TIMEOUT. Only libc is used.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

static size_t read_cmdline(char *buf, size_t cap)
{
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t n = 0;
    while (n < cap - 1) {
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r <= 0)
            break;
        n += (size_t) r;
    }
    close(fd);
    /* arguments are NUL-separated: make them \x1f-separated, drop the final NUL */
    if (n > 0 && buf[n - 1] == '\0')
        n--;
    for (size_t i = 0; i < n; i++) {
        if (buf[i] == '\0')
            buf[i] = '\x1f';
        else if (buf[i] == '\n' || buf[i] == '\t')
            buf[i] = ' ';
    }
    buf[n] = '\0';
    return n;
}

static const char *or_dash(const char *s)
{
    return (s && *s) ? s : "-";
}

static void append(const char *log, const char *line, int len)
{
    if (len <= 0)
        return;
    int fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    ssize_t w = write(fd, line, (size_t) len);
    (void) w;
    close(fd);
}

static double now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec + tv.tv_usec / 1e6;
}

static pid_t launcher_pid;

static void launcher_exit(int status, void *arg)
{
    (void) arg;
    /* a child forked by the launcher that calls exit() before exec is not the launcher */
    if (getpid() != launcher_pid)
        return;
    const char *log = getenv("KAURI_SUITE_EXECLOG");
    if (!log || !*log)
        return;
    char line[128];
    int len = snprintf(line, sizeof line, "E\t%d\t%.3f\t%d\n", (int) launcher_pid, now(), status & 0xff);
    append(log, line, len);
}

__attribute__((constructor))
static void kauri_execlog(void)
{
    const char *log = getenv("KAURI_SUITE_EXECLOG");
    if (!log || !*log)
        return;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return;
    exe[n] = '\0';

    const char *launcher = getenv("KAURI_SUITE_LAUNCHER");
    const char *root = getenv("KAURI_SUITE_ROOT");
    int is_launcher = launcher && strcmp(exe, launcher) == 0;
    int is_test = root && *root && strncmp(exe, root, strlen(root)) == 0;
    if (!is_launcher && !is_test)
        return;

    double t = now();
    char cmd[4096];
    read_cmdline(cmd, sizeof cmd);
    char envs[1024] = "";
    const char *names = getenv("KAURI_SUITE_ENVLOG");
    size_t used = 0;
    while (!is_launcher && names && *names) {
        size_t len = strcspn(names, ",");
        char name[128];
        if (len > 0 && len < sizeof name) {
            memcpy(name, names, len);
            name[len] = '\0';
            const char *v = getenv(name);
            if (v) {
                int w = snprintf(envs + used, sizeof envs - used, "%s%s=%s", used ? "\x1f" : "",
                                 name, v);
                if (w < 0 || (size_t) w >= sizeof envs - used)
                    break;
                used += (size_t) w;
            }
        }
        names += len + (names[len] == ',');
    }
    for (size_t i = 0; i < used; i++)
        if (envs[i] == '\n' || envs[i] == '\t')
            envs[i] = ' ';
    char line[8192 + 512];
    int len;
    if (is_launcher) {
        char pid[32];
        snprintf(pid, sizeof pid, "%d", (int) getpid());
        setenv("KAURI_SUITE_JOB", pid, 0);
        launcher_pid = getpid();
        on_exit(launcher_exit, NULL);
        len = snprintf(line, sizeof line, "L\t%d\t%.3f\t%s\t%s\n", (int) getpid(), t,
                       or_dash(getenv("MPIEXEC_TIMEOUT")), cmd);
    } else {
        len = snprintf(line, sizeof line, "P\t%d\t%d\t%.3f\t%s\t%s\t%s\t%s\t%s\n", (int) getpid(),
                       (int) getppid(), t, or_dash(getenv("KAURI_SUITE_JOB")),
                       or_dash(getenv("PMI_RANK")), exe, cmd, or_dash(envs));
    }
    if ((size_t) len >= sizeof line)
        len = sizeof line - 1;
    append(log, line, len);
}
