/* An MPI program that reaches its MPI only through a library of its own, as a program linked
 * to PETSc, HDF5 or ScaLAPACK does: built once as that library (the MPI calls, in
 * `through_lib_main`; `mpicc -shared -fPIC`) and once with -DTHROUGH_LIB_MAIN as the program
 * (plain `cc`, linked to the library alone: its own libraries name no MPI). Prints one line
 * per rank, "through_lib: rank R of N", after an allreduce; with -DTHROUGH_LIB_GROUPS (Open
 * MPI 5) also builds a communicator with MPI_Comm_create_from_group, whose context id comes
 * from the PMIx server (`PMIx_Group_construct`), and says "groups ok". */
#ifdef THROUGH_LIB_MAIN
int through_lib_main(int argc, char **argv);
int main(int argc, char **argv) { return through_lib_main(argc, argv); }
#else
#include <mpi.h>
#include <stdio.h>

int through_lib_main(int argc, char **argv) {
    int rank, size, sum = 0;
    const char *groups = "";
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (sum != size * (size - 1) / 2) {
        printf("through_lib: rank %d: allreduce gave %d\n", rank, sum);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
#ifdef THROUGH_LIB_GROUPS
    {
        MPI_Group world;
        MPI_Comm all;
        int n = 0;
        MPI_Comm_group(MPI_COMM_WORLD, &world);
        int rc = MPI_Comm_create_from_group(world, "kauri.through_lib", MPI_INFO_NULL,
                                            MPI_ERRORS_RETURN, &all);
        if (rc == MPI_SUCCESS) {
            MPI_Comm_size(all, &n);
            MPI_Comm_free(&all);
        }
        groups = rc == MPI_SUCCESS && n == size ? " groups ok" : " groups FAILED";
        MPI_Group_free(&world);
    }
#endif
    printf("through_lib: rank %d of %d%s\n", rank, size, groups);
    MPI_Finalize();
    return 0;
}
#endif
