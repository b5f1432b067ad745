/* The wheels hello, timed: as hello.c, and every rank also prints when it started (the
 * kernel's start time, /proc/self/stat field 22, in clock ticks since boot), when main was
 * entered and when MPI_Init returned, both CLOCK_BOOTTIME in ns, the clock the start time
 * counts on. benches/wheels.rs (--phases) subtracts the launcher's own start from them:
 *   T rank R of N: start_ticks S hz H main_ns M init_ns I */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_BOOTTIME, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Field 22 of /proc/self/stat (after the parenthesised command name). */
static long long start_ticks(void) {
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (!p) return -1;
    long long v = -1;
    int field = 2;
    for (p++; *p && field < 22; p++)
        if (*p == ' ') field++;
    sscanf(p, "%lld", &v);
    return v;
}

static long long main_ns, init_ns;

#define HELLO_AT_MAIN() (main_ns = now_ns())
#define HELLO_AT_INIT() (init_ns = now_ns())
#define HELLO_REPORT(rank, size)                                                             \
    printf("T rank %d of %d: start_ticks %lld hz %ld main_ns %lld init_ns %lld\n", rank, size, \
           start_ticks(), sysconf(_SC_CLK_TCK), main_ns, init_ns)

#include "hello.c"
