/* The wheels hello, timed: as hello.c, and every rank also prints when it started (the
 * kernel's start time, /proc/self/stat field 22, in clock ticks since boot), when main was
 * entered and when MPI_Init returned, both CLOCK_BOOTTIME in ns, the clock the start time
 * counts on. benches/wheels.rs (--phases) subtracts the launcher's own start from them:
 *   T rank R of N: start_ticks S hz H main_ns M init_ns I */
#include <mpi.h>
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

int main(int argc, char **argv) {
    long long main_ns = now_ns();
    int rank, size, len;
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    MPI_Init(&argc, &argv);
    long long init_ns = now_ns();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, "\n")] = 0;
    int sum = 0;
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (sum != size * (size - 1) / 2) {
        fprintf(stderr, "rank %d: allreduce %d\n", rank, sum);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    printf("T rank %d of %d: start_ticks %lld hz %ld main_ns %lld init_ns %lld\n", rank, size,
           start_ticks(), sysconf(_SC_CLK_TCK), main_ns, init_ns);
    printf("OK hello rank %d of %d: %.60s\n", rank, size, lib);
    MPI_Finalize();
    return 0;
}
