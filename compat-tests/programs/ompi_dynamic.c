/* Dynamic processes of an Open MPI program, through its launcher's PMIx server:
 *   ompi_dynamic spawn N    the world spawns N copies of itself; each child sends its rank to
 *                           parent rank 0 over the intercommunicator
 *   ompi_dynamic multiple   MPI_Comm_spawn_multiple: two copies with argument "a", one with "b"
 *   ompi_dynamic nested     the world spawns one child, which spawns one grandchild; a value
 *                           travels grandchild -> child -> parent
 *   ompi_dynamic siblings   the world spawns a server job and, separately, a client job: the
 *                           server opens a port and publishes it, the client looks it up and
 *                           connects (connect/accept between two unrelated jobs)
 *   ompi_dynamic unplaceable a spawn on a host that is not in the run fails with an error
 *                           class, and the world goes on
 *   ompi_dynamic placed KEY VALUE N  the world spawns N children with info KEY=VALUE (npernode,
 *                           map_by, ...); each prints its host (KAURI_HOST, else the processor
 *                           name)
 *   ompi_dynamic dirs       the world spawns 2 children; parents and children print their host
 *                           (KAURI_HOST) and shared-memory directory
 *                           (OMPI_MCA_btl_vader_backing_directory), the children whether
 *                           PMIX_PARENT_ID names parent rank 0: kauri-only
 * Every line printed is the same whatever the launcher; each ends with a disconnect. */
#include <mpi.h>
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SERVICE "kauri-compat-dynamic"

static void spawn_self(char *self, char *arg, int n, MPI_Comm *inter) {
    char *args[] = {arg, NULL};
    int errs[16];
    MPI_Comm_spawn(self, args, n, MPI_INFO_NULL, 0, MPI_COMM_WORLD, inter, errs);
}

static void report_to_parent(MPI_Comm parent, int v) {
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) MPI_Send(&v, 1, MPI_INT, 0, 1, parent);
    MPI_Comm_disconnect(&parent);
}

static void print_dirs(const char *who) {
    const char *h = getenv("KAURI_HOST"), *d = getenv("OMPI_MCA_btl_vader_backing_directory");
    printf("dirs: %s on %s: %s\n", who, h ? h : "?", d ? d : "none");
    fflush(stdout);
}

static int child(char *self, MPI_Comm parent, int argc, char **argv) {
    int rank, size, psize;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_remote_size(parent, &psize);
    const char *role = argv[1];
    if (!strcmp(role, "child-spawn")) {
        MPI_Send(&rank, 1, MPI_INT, 0, 7, parent);
        printf("spawn: child %d of %d, parent world of %d\n", rank, size, psize);
        MPI_Comm_disconnect(&parent);
    } else if (!strcmp(role, "child-multiple")) {
        int *appnum, flag;
        MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &appnum, &flag);
        printf("multiple: a child of %d, appnum %d, argument %s\n", size,
               flag ? *appnum : -1, argc > 2 ? argv[2] : "none");
        report_to_parent(parent, 1);
    } else if (!strcmp(role, "child-nested")) {
        MPI_Comm inter;
        int v;
        spawn_self(self, "grandchild-nested", 1, &inter);
        MPI_Recv(&v, 1, MPI_INT, 0, 1, inter, MPI_STATUS_IGNORE);
        MPI_Comm_disconnect(&inter);
        report_to_parent(parent, v + 1);
    } else if (!strcmp(role, "grandchild-nested")) {
        report_to_parent(parent, 42);
    } else if (!strcmp(role, "child-placed")) {
        char name[MPI_MAX_PROCESSOR_NAME];
        int len;
        const char *h = getenv("KAURI_HOST");
        MPI_Get_processor_name(name, &len);
        printf("placed: child %d of %d on %s\n", rank, size, h ? h : name);
        fflush(stdout);
        report_to_parent(parent, 1);
    } else if (!strcmp(role, "child-dirs")) {
        /* The parent job's namespace came as argv[2]. */
        pmix_proc_t me, job;
        pmix_value_t *v = NULL;
        print_dirs("child");
        if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) {
            printf("dirs: child %d: PMIx_Init failed\n", rank);
        } else {
            PMIX_PROC_LOAD(&job, me.nspace, PMIX_RANK_WILDCARD);
            pmix_status_t rc = PMIx_Get(&job, PMIX_PARENT_ID, NULL, 0, &v);
            if (rc != PMIX_SUCCESS || v->type != PMIX_PROC)
                printf("dirs: child %d: no PMIX_PARENT_ID (%s)\n", rank, PMIx_Error_string(rc));
            else
                printf("dirs: child %d: parent %s rank %u\n", rank,
                       strcmp(v->data.proc->nspace, argv[2]) ? "another job" : "the world",
                       v->data.proc->rank);
            PMIx_Finalize(NULL, 0);
        }
        report_to_parent(parent, 1);
    } else if (!strcmp(role, "server")) {
        char port[MPI_MAX_PORT_NAME];
        MPI_Comm client;
        int v;
        MPI_Open_port(MPI_INFO_NULL, port);
        MPI_Publish_name(SERVICE, MPI_INFO_NULL, port);
        MPI_Comm_accept(port, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &client);
        MPI_Recv(&v, 1, MPI_INT, 0, 3, client, MPI_STATUS_IGNORE);
        printf("siblings: the server got %d from the client\n", v);
        MPI_Comm_disconnect(&client);
        MPI_Unpublish_name(SERVICE, MPI_INFO_NULL, port);
        MPI_Close_port(port);
        report_to_parent(parent, 1);
    } else if (!strcmp(role, "client")) {
        char port[MPI_MAX_PORT_NAME];
        MPI_Comm server;
        int v = 7, tries = 0;
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        /* The server may not have published yet: ask again for up to two minutes. */
        while (MPI_Lookup_name(SERVICE, MPI_INFO_NULL, port) != MPI_SUCCESS) {
            if (++tries > 1200) {
                printf("siblings: the client never found the service\n");
                MPI_Abort(MPI_COMM_WORLD, 3);
            }
            usleep(100000);
        }
        MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &server);
        MPI_Send(&v, 1, MPI_INT, 0, 3, server);
        MPI_Comm_disconnect(&server);
        report_to_parent(parent, 1);
    } else {
        fprintf(stderr, "unknown role %s\n", role);
        return 2;
    }
    return 0;
}

int main(int argc, char **argv) {
    MPI_Comm parent, inter, second;
    int rank, size, rc = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_get_parent(&parent);
    if (parent != MPI_COMM_NULL) {
        rc = child(argv[0], parent, argc, argv);
        MPI_Finalize();
        return rc;
    }
    const char *mode = argc > 1 ? argv[1] : "spawn";
    if (!strcmp(mode, "spawn")) {
        int n = argc > 2 ? atoi(argv[2]) : 2, rsize, sum = 0;
        spawn_self(argv[0], "child-spawn", n, &inter);
        MPI_Comm_remote_size(inter, &rsize);
        if (rank == 0) {
            for (int i = 0; i < rsize; i++) {
                int v;
                MPI_Recv(&v, 1, MPI_INT, i, 7, inter, MPI_STATUS_IGNORE);
                sum += v;
            }
            printf("spawn: parent world of %d: %d children, sum of their ranks %d\n", size,
                   rsize, sum);
        }
        MPI_Comm_disconnect(&inter);
    } else if (!strcmp(mode, "placed") && argc > 4) {
        MPI_Info info;
        char *args[] = {"child-placed", NULL};
        int n = atoi(argv[4]), errs[64], v;
        MPI_Info_create(&info);
        MPI_Info_set(info, argv[2], argv[3]);
        MPI_Comm_spawn(argv[0], args, n, info, 0, MPI_COMM_WORLD, &inter, errs);
        MPI_Info_free(&info);
        if (rank == 0) MPI_Recv(&v, 1, MPI_INT, 0, 1, inter, MPI_STATUS_IGNORE);
        MPI_Comm_disconnect(&inter);
    } else if (!strcmp(mode, "dirs")) {
        int v, errs[2];
        const char *ns = getenv("PMIX_NAMESPACE");
        char *args[] = {"child-dirs", (char *)(ns ? ns : "?"), NULL};
        print_dirs("parent");
        MPI_Comm_spawn(argv[0], args, 2, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, errs);
        if (rank == 0) MPI_Recv(&v, 1, MPI_INT, 0, 1, inter, MPI_STATUS_IGNORE);
        MPI_Comm_disconnect(&inter);
    } else if (!strcmp(mode, "multiple")) {
        char *cmds[2] = {argv[0], argv[0]};
        char *a[] = {"child-multiple", "a", NULL}, *b[] = {"child-multiple", "b", NULL};
        char **args[2] = {a, b};
        int n[2] = {2, 1}, errs[3], v, rsize;
        MPI_Info infos[2] = {MPI_INFO_NULL, MPI_INFO_NULL};
        MPI_Comm_spawn_multiple(2, cmds, args, n, infos, 0, MPI_COMM_WORLD, &inter, errs);
        MPI_Comm_remote_size(inter, &rsize);
        if (rank == 0) {
            MPI_Recv(&v, 1, MPI_INT, 0, 1, inter, MPI_STATUS_IGNORE);
            printf("multiple: %d children\n", rsize);
        }
        MPI_Comm_disconnect(&inter);
    } else if (!strcmp(mode, "nested")) {
        int v;
        spawn_self(argv[0], "child-nested", 1, &inter);
        if (rank == 0) {
            MPI_Recv(&v, 1, MPI_INT, 0, 1, inter, MPI_STATUS_IGNORE);
            printf("nested: %d came from the grandchild through the child\n", v);
        }
        MPI_Comm_disconnect(&inter);
    } else if (!strcmp(mode, "siblings")) {
        int v;
        spawn_self(argv[0], "server", 1, &inter);
        spawn_self(argv[0], "client", 1, &second);
        if (rank == 0) {
            MPI_Recv(&v, 1, MPI_INT, 0, 1, inter, MPI_STATUS_IGNORE);
            MPI_Recv(&v, 1, MPI_INT, 0, 1, second, MPI_STATUS_IGNORE);
            printf("siblings: server and client are done\n");
        }
        MPI_Comm_disconnect(&inter);
        MPI_Comm_disconnect(&second);
    } else if (!strcmp(mode, "unplaceable")) {
        MPI_Info info;
        char *args[] = {"child-spawn", NULL};
        int errs[2], cls, err;
        MPI_Info_create(&info);
        MPI_Info_set(info, "host", "no-such-host-kauri");
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        err = MPI_Comm_spawn(argv[0], args, 1, info, 0, MPI_COMM_WORLD, &inter, errs);
        MPI_Error_class(err, &cls);
        MPI_Info_free(&info);
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0)
            printf("unplaceable: the spawn %s\n", err == MPI_SUCCESS ? "succeeded" : "failed");
        MPI_Barrier(MPI_COMM_WORLD);
        printf("unplaceable: rank %d goes on\n", rank);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        rc = 2;
    }
    MPI_Finalize();
    return rc;
}
