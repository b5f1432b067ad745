/* stdin: rank 0 reads all of stdin, computes its byte count and a checksum (FNV-1a 64),
 * broadcasts both; every rank prints "stdin: rank R bytes=B fnv=HEX". */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int rank;
    uint64_t v[2] = {0, 0xcbf29ce484222325ULL}; /* bytes, hash */
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        unsigned char buf[65536];
        ssize_t n;
        while ((n = read(0, buf, sizeof buf)) != 0) {
            if (n < 0) {
                perror("stdin: read");
                MPI_Abort(MPI_COMM_WORLD, 3);
            }
            for (ssize_t i = 0; i < n; i++) {
                v[1] ^= buf[i];
                v[1] *= 0x100000001b3ULL;
            }
            v[0] += (uint64_t)n;
        }
    }
    MPI_Bcast(v, 2, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    printf("stdin: rank %d bytes=%llu fnv=%016llx\n", rank, (unsigned long long)v[0],
           (unsigned long long)v[1]);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
