/* Singleton init, for MPICH's ch3 PMI-1 build: this program is started WITHOUT a launcher.
 * When it needs a process manager, MPICH's PMI-1 client runs `mpiexec -pmi_args PORT IFACE
 * KEY PID` from PATH and waits for it to connect back.
 *
 *   singleton spawn N            spawns N children (this program); each sends its rank and
 *                                size to the parent, which prints one line per child.
 *   singleton universe           prints MPI_UNIVERSE_SIZE (or "unset").
 *   singleton join server FILE   listens on loopback, writes its port to FILE, accepts one
 *                                connection and MPI_Comm_join's it; sends 42.
 *   singleton join client FILE   reads the port from FILE (waiting up to 60 s), connects,
 *                                MPI_Comm_join's; receives and prints the int.
 *   singleton crash N            spawns N children that crash (SIGSEGV) after MPI_Init,
 *                                then waits for a message that never comes.
 * Every process prints "pid=PID" lines so a test can check that all of them are gone.
 */
#include <arpa/inet.h>
#include <mpi.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int join_fd(const char *role, const char *file) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (strcmp(role, "server") == 0) {
        socklen_t len = sizeof a;
        if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 1) ||
            getsockname(fd, (struct sockaddr *)&a, &len)) {
            perror("join server");
            exit(2);
        }
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", file);
        FILE *f = fopen(tmp, "w");
        fprintf(f, "%d\n", ntohs(a.sin_port));
        fclose(f);
        rename(tmp, file);
        int c = accept(fd, NULL, NULL);
        close(fd);
        return c;
    }
    int port = 0;
    for (int i = 0; i < 600 && port == 0; i++) {
        FILE *f = fopen(file, "r");
        if (f) {
            if (fscanf(f, "%d", &port) != 1)
                port = 0;
            fclose(f);
        }
        if (port == 0)
            usleep(100000);
    }
    a.sin_port = htons(port);
    if (port == 0 || connect(fd, (struct sockaddr *)&a, sizeof a)) {
        perror("join client");
        exit(2);
    }
    return fd;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    MPI_Comm parent;
    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    if (parent != MPI_COMM_NULL) {
        int rank, size;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        printf("child: rank=%d pid=%d\n", rank, (int)getpid());
        fflush(stdout);
        if (strcmp(mode, "crash") == 0)
            raise(SIGSEGV);
        int msg[2] = {rank, size};
        MPI_Send(msg, 2, MPI_INT, 0, 0, parent);
        MPI_Comm_disconnect(&parent);
        MPI_Finalize();
        return 0;
    }
    printf("singleton: pid=%d\n", (int)getpid());
    fflush(stdout);
    if (strcmp(mode, "spawn") == 0 || strcmp(mode, "crash") == 0) {
        int n = argc > 2 ? atoi(argv[2]) : 2, errs[64];
        char *cargv[] = {(char *)mode, NULL};
        MPI_Comm inter;
        MPI_Comm_spawn(argv[0], cargv, n, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter, errs);
        for (int i = 0; i < n; i++) {
            int msg[2];
            MPI_Recv(msg, 2, MPI_INT, MPI_ANY_SOURCE, 0, inter, MPI_STATUS_IGNORE);
            printf("singleton: child rank=%d size=%d\n", msg[0], msg[1]);
        }
        MPI_Comm_disconnect(&inter);
    } else if (strcmp(mode, "universe") == 0) {
        int *u, flag = 0;
        MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &u, &flag);
        if (flag)
            printf("universe: %d\n", *u);
        else
            printf("universe: unset\n");
    } else if (strcmp(mode, "join") == 0 && argc > 3) {
        int fd = join_fd(argv[2], argv[3]), v = 0;
        MPI_Comm inter;
        MPI_Comm_join(fd, &inter);
        if (strcmp(argv[2], "server") == 0) {
            v = 42;
            MPI_Send(&v, 1, MPI_INT, 0, 0, inter);
            printf("join: sent %d\n", v);
        } else {
            MPI_Recv(&v, 1, MPI_INT, 0, 0, inter, MPI_STATUS_IGNORE);
            printf("join: got %d\n", v);
        }
        MPI_Comm_disconnect(&inter);
        close(fd);
    } else {
        fprintf(stderr, "usage: singleton spawn N | universe | join server|client FILE | crash N\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    printf("singleton: done\n");
    MPI_Finalize();
    return 0;
}
