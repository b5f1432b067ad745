/* Open MPI 5's communicators from groups (MPI 4.0 sessions-era calls), whose context id
 * comes from PMIx_Group_construct with PMIX_GROUP_ASSIGN_CONTEXT_ID:
 *   - MPI_Comm_create_from_group of the world's even ranks (odd ranks take part in none),
 *   - MPI_Comm_create_from_group of every rank, twice (two constructs, two context ids),
 *   - MPI_Intercomm_create_from_groups of the lower and the upper half,
 * each checked for size and rank, with a message across (an allreduce, a send over the
 * intercommunicator). Prints one line per rank: "ompi5_groups: ok rank=R size=N", or the
 * first failure and exits 1. Needs at least 2 ranks. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int rank, size;

static void check(int rc, const char *what) {
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        printf("ompi5_groups: rank %d: %s failed: %s\n", rank, what, msg);
        fflush(stdout);
        exit(1);
    }
}

static void expect(int got, int want, const char *what) {
    if (got != want) {
        printf("ompi5_groups: rank %d: %s is %d, not %d\n", rank, what, got, want);
        fflush(stdout);
        exit(1);
    }
}

int main(int argc, char **argv) {
    MPI_Group world, evens, all, low, high;
    MPI_Comm ceven = MPI_COMM_NULL, call, call2, inter;
    int n, r, sum, i;
    int ranks[4096];
    (void)argc;
    (void)argv;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (size < 2 || size > 4096) {
        printf("ompi5_groups: needs 2 to 4096 ranks\n");
        return 1;
    }
    MPI_Comm_group(MPI_COMM_WORLD, &world);

    /* The even ranks. */
    n = 0;
    for (i = 0; i < size; i += 2) ranks[n++] = i;
    MPI_Group_incl(world, n, ranks, &evens);
    if (rank % 2 == 0) {
        check(MPI_Comm_create_from_group(evens, "kauri.evens", MPI_INFO_NULL,
                                         MPI_ERRORS_RETURN, &ceven),
              "MPI_Comm_create_from_group(evens)");
        MPI_Comm_size(ceven, &n);
        MPI_Comm_rank(ceven, &r);
        expect(n, (size + 1) / 2, "the evens' size");
        expect(r, rank / 2, "my rank among the evens");
        check(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, ceven), "allreduce(evens)");
        expect(sum, (n - 1) * n, "the sum of the even ranks");
        MPI_Comm_free(&ceven);
    }

    /* Everyone, twice. */
    MPI_Comm_group(MPI_COMM_WORLD, &all);
    check(MPI_Comm_create_from_group(all, "kauri.all", MPI_INFO_NULL, MPI_ERRORS_RETURN, &call),
          "MPI_Comm_create_from_group(all)");
    check(MPI_Comm_create_from_group(all, "kauri.all2", MPI_INFO_NULL, MPI_ERRORS_RETURN,
                                     &call2),
          "MPI_Comm_create_from_group(all, again)");
    MPI_Comm_size(call, &n);
    MPI_Comm_rank(call, &r);
    expect(n, size, "the size of all");
    expect(r, rank, "my rank in all");
    check(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, call), "allreduce(all)");
    expect(sum, size * (size - 1) / 2, "the sum of all ranks");
    check(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_MAX, call2), "allreduce(all, again)");
    expect(sum, size - 1, "the largest rank");

    /* The lower half against the upper half. */
    n = 0;
    for (i = 0; i < size / 2; i++) ranks[n++] = i;
    MPI_Group_incl(world, n, ranks, &low);
    n = 0;
    for (i = size / 2; i < size; i++) ranks[n++] = i;
    MPI_Group_incl(world, n, ranks, &high);
    {
        int in_low = rank < size / 2;
        int rsize, lsize, peer, got = -1;
        check(MPI_Intercomm_create_from_groups(in_low ? low : high, 0, in_low ? high : low, 0,
                                               "kauri.halves", MPI_INFO_NULL,
                                               MPI_ERRORS_RETURN, &inter),
              "MPI_Intercomm_create_from_groups");
        MPI_Comm_size(inter, &lsize);
        MPI_Comm_remote_size(inter, &rsize);
        MPI_Comm_rank(inter, &r);
        expect(lsize, in_low ? size / 2 : size - size / 2, "the local half's size");
        expect(rsize, in_low ? size - size / 2 : size / 2, "the remote half's size");
        expect(r, in_low ? rank : rank - size / 2, "my rank in my half");
        /* Rank 0 of each half sends its world rank to rank 0 of the other. */
        if (r == 0) {
            peer = in_low ? size / 2 : 0;
            check(MPI_Sendrecv(&rank, 1, MPI_INT, 0, 7, &got, 1, MPI_INT, 0, 7, inter,
                               MPI_STATUS_IGNORE),
                  "sendrecv across the halves");
            expect(got, peer, "the world rank from across");
        }
        MPI_Comm_free(&inter);
    }

    MPI_Comm_free(&call);
    MPI_Comm_free(&call2);
    MPI_Group_free(&evens);
    MPI_Group_free(&all);
    MPI_Group_free(&low);
    MPI_Group_free(&high);
    MPI_Group_free(&world);
    printf("ompi5_groups: ok rank=%d size=%d\n", rank, size);
    MPI_Finalize();
    return 0;
}
