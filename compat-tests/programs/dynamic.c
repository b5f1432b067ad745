/* Dynamic processes through the process manager, for MPICH's ch3 builds.
 *
 *   dynamic spawn N [host=H] [wdir=D]  rank 0 of the parents spawns N children (this program);
 *                                      every child sends its rank, size, host name and cwd to
 *                                      the parents' rank 0, which prints one line per child.
 *   dynamic multi N1 N2 HOST1 HOST2    MPI_Comm_spawn_multiple: N1 children on HOST1, N2 on
 *                                      HOST2 (each command's appnum is checked by the child).
 *   dynamic nest DEPTH                 a chain: each generation spawns one child, DEPTH deep.
 *   dynamic badhost H                  spawns one child on host H: prints the error class.
 *   dynamic serve NAME                 opens a port, publishes NAME, accepts one client,
 *                                      receives an int, prints it, unpublishes.
 *   dynamic connect NAME               looks NAME up (retrying up to 60 s), connects, sends 42.
 *   dynamic universe                   prints MPI_UNIVERSE_SIZE (or "unset").
 * Children are started as "dynamic child MODE ...". Output lines start with the role.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void child(int argc, char **argv) {
    MPI_Comm parent;
    int rank, size, appnum = -1, flag = 0, *ap;
    char host[256], cwd[512], msg[1024];
    MPI_Comm_get_parent(&parent);
    if (parent == MPI_COMM_NULL) {
        printf("child: no parent\n");
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &ap, &flag);
    if (flag)
        appnum = *ap;
    gethostname(host, sizeof host);
    const char *kh = getenv("KAURI_HOST");
    if (!getcwd(cwd, sizeof cwd))
        strcpy(cwd, "?");
    if (argc > 2 && strcmp(argv[2], "nest") == 0) {
        int depth = atoi(argv[3]);
        printf("nest: generation %d alive\n", depth);
        fflush(stdout);
        if (depth > 1) {
            char d[16], *cargv[] = {"child", "nest", d, NULL};
            MPI_Comm inter;
            snprintf(d, sizeof d, "%d", depth - 1);
            MPI_Comm_spawn(argv[0], cargv, 1, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter,
                           MPI_ERRCODES_IGNORE);
            int got;
            MPI_Recv(&got, 1, MPI_INT, 0, 0, inter, MPI_STATUS_IGNORE);
            MPI_Comm_disconnect(&inter);
        }
        int one = 1;
        MPI_Send(&one, 1, MPI_INT, 0, 0, parent);
        MPI_Comm_disconnect(&parent);
        return;
    }
    snprintf(msg, sizeof msg, "rank=%d size=%d appnum=%d host=%s cwd=%s", rank, size, appnum,
             kh ? kh : host, cwd);
    MPI_Send(msg, (int)strlen(msg) + 1, MPI_CHAR, 0, 0, parent);
    MPI_Comm_disconnect(&parent);
}

static void collect(MPI_Comm inter, int n) {
    for (int i = 0; i < n; i++) {
        char msg[1024];
        MPI_Recv(msg, sizeof msg, MPI_CHAR, MPI_ANY_SOURCE, 0, inter, MPI_STATUS_IGNORE);
        printf("child %s\n", msg);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "child") == 0) {
        child(argc, argv);
    } else if (strcmp(mode, "spawn") == 0) {
        int n = atoi(argv[2]);
        MPI_Info info;
        MPI_Info_create(&info);
        for (int i = 3; i < argc; i++) {
            char *eq = strchr(argv[i], '=');
            if (eq) {
                *eq = 0;
                MPI_Info_set(info, argv[i], eq + 1);
            }
        }
        MPI_Comm inter;
        int errs[64];
        MPI_Comm_spawn(argv[0], (char *[]){"child", "spawn", NULL}, n, info, 0, MPI_COMM_WORLD,
                       &inter, errs);
        if (rank == 0)
            collect(inter, n);
        MPI_Comm_disconnect(&inter);
        MPI_Info_free(&info);
        if (rank == 0)
            printf("parent: spawned %d\n", n);
    } else if (strcmp(mode, "multi") == 0) {
        int n[2] = {atoi(argv[2]), atoi(argv[3])};
        MPI_Info infos[2];
        char *cmds[2] = {argv[0], argv[0]};
        char *a0[] = {"child", "multi", NULL};
        char **cargvs[2] = {a0, a0};
        for (int i = 0; i < 2; i++) {
            MPI_Info_create(&infos[i]);
            MPI_Info_set(infos[i], "host", argv[4 + i]);
        }
        MPI_Comm inter;
        MPI_Comm_spawn_multiple(2, cmds, cargvs, n, infos, 0, MPI_COMM_WORLD, &inter,
                                MPI_ERRCODES_IGNORE);
        if (rank == 0)
            collect(inter, n[0] + n[1]);
        MPI_Comm_disconnect(&inter);
        for (int i = 0; i < 2; i++)
            MPI_Info_free(&infos[i]);
        if (rank == 0)
            printf("parent: spawned %d+%d\n", n[0], n[1]);
    } else if (strcmp(mode, "nest") == 0) {
        if (rank == 0) {
            MPI_Comm inter;
            int depth = atoi(argv[2]);
            MPI_Comm_spawn(argv[0], (char *[]){"child", "nest", argv[2], NULL}, 1, MPI_INFO_NULL,
                           0, MPI_COMM_SELF, &inter, MPI_ERRCODES_IGNORE);
            int got;
            MPI_Recv(&got, 1, MPI_INT, 0, 0, inter, MPI_STATUS_IGNORE);
            MPI_Comm_disconnect(&inter);
            printf("parent: chain of %d done\n", depth);
        }
    } else if (strcmp(mode, "badhost") == 0) {
        MPI_Info info;
        MPI_Info_create(&info);
        MPI_Info_set(info, "host", argv[2]);
        MPI_Comm inter;
        int err;
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
        int rc = MPI_Comm_spawn(argv[0], (char *[]){"child", "spawn", NULL}, 1, info, 0,
                                MPI_COMM_SELF, &inter, &err);
        if (rank == 0)
            printf("parent: spawn on %s %s\n", argv[2], rc == MPI_SUCCESS ? "succeeded" : "failed");
        MPI_Info_free(&info);
    } else if (strcmp(mode, "serve") == 0) {
        if (rank == 0) {
            char port[MPI_MAX_PORT_NAME];
            MPI_Comm client;
            int v;
            MPI_Open_port(MPI_INFO_NULL, port);
            MPI_Publish_name(argv[2], MPI_INFO_NULL, port);
            printf("server: published %s\n", argv[2]);
            fflush(stdout);
            MPI_Comm_accept(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &client);
            MPI_Recv(&v, 1, MPI_INT, 0, 0, client, MPI_STATUS_IGNORE);
            printf("server: received %d\n", v);
            MPI_Comm_disconnect(&client);
            MPI_Unpublish_name(argv[2], MPI_INFO_NULL, port);
            MPI_Close_port(port);
        }
    } else if (strcmp(mode, "connect") == 0) {
        if (rank == 0) {
            char port[MPI_MAX_PORT_NAME];
            MPI_Comm server;
            int v = 42, rc = !MPI_SUCCESS;
            MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
            MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
            for (int i = 0; i < 600 && rc != MPI_SUCCESS; i++) {
                rc = MPI_Lookup_name(argv[2], MPI_INFO_NULL, port);
                if (rc != MPI_SUCCESS)
                    usleep(100000);
            }
            if (rc != MPI_SUCCESS) {
                printf("client: lookup of %s failed\n", argv[2]);
                MPI_Abort(MPI_COMM_WORLD, 4);
            }
            MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &server);
            MPI_Send(&v, 1, MPI_INT, 0, 0, server);
            MPI_Comm_disconnect(&server);
            printf("client: sent %d\n", v);
        }
    } else if (strcmp(mode, "universe") == 0) {
        int *u, flag;
        MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &u, &flag);
        if (rank == 0) {
            if (flag)
                printf("universe %d\n", *u);
            else
                printf("universe unset\n");
        }
    } else {
        if (rank == 0)
            printf("usage: dynamic spawn|multi|nest|badhost|serve|connect|universe ...\n");
        MPI_Finalize();
        return 2;
    }
    MPI_Finalize();
    return 0;
}
