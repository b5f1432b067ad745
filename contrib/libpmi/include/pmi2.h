/*
 * pmi2.h: the PMI-2 client API of Kauri's libpmi2.so (contrib/libpmi).
 *
 * Declarations of the PMI-2 interface with its usual constant values. The library talks
 * the PMI-2 wire protocol to the server named by PMI_FD, or PMI_PORT and PMI_ID (Kauri,
 * mpiexec.hydra, Slurm's pmi2 plugin); with neither set, the process is a singleton (rank 0
 * of 1, KVS and node attributes in memory). See docs/libpmi.md.
 *
 * Differences from MPICH's pmi2.h, which passes MPICH-internal info structures: spawn takes
 * plain key/value pairs (PMI2_Keyval_t), and the name-service calls take their (ignored)
 * info argument as `const void *`.
 *
 * Buffer sizes count the terminating NUL. Calls are thread-safe (serialised).
 */
#ifndef KAURI_PMI2_H_INCLUDED
#define KAURI_PMI2_H_INCLUDED

#ifdef __cplusplus
extern "C" {
#endif

/* Limits */
#define PMI2_MAX_KEYLEN     64
#define PMI2_MAX_VALLEN     1024
#define PMI2_MAX_ATTRVALUE  1024
#define PMI2_ID_NULL        -1

/* Return codes */
#define PMI2_SUCCESS                 0
#define PMI2_FAIL                   -1
#define PMI2_ERR_INIT                1
#define PMI2_ERR_NOMEM               2
#define PMI2_ERR_INVALID_ARG         3
#define PMI2_ERR_INVALID_KEY         4
#define PMI2_ERR_INVALID_KEY_LENGTH  5
#define PMI2_ERR_INVALID_VAL         6
#define PMI2_ERR_INVALID_VAL_LENGTH  7
#define PMI2_ERR_INVALID_LENGTH      8
#define PMI2_ERR_INVALID_NUM_ARGS    9
#define PMI2_ERR_INVALID_ARGS       10
#define PMI2_ERR_INVALID_NUM_PARSED 11
#define PMI2_ERR_INVALID_KEYVALP    12
#define PMI2_ERR_INVALID_SIZE       13
#define PMI2_ERR_OTHER              14

/* The connection a job connect could use to copy a KVS (this library never does). */
typedef struct PMI2_Connect_comm {
    int (*read)(void *buf, int maxlen, void *ctx);
    int (*write)(const void *buf, int len, void *ctx);
    void *ctx;
    int isMaster;
} PMI2_Connect_comm_t;

/* One key and value of a spawn's info or preput vector. */
typedef struct PMI2_Keyval {
    const char *key;
    const char *val;
} PMI2_Keyval_t;

/* Session */
int PMI2_Init(int *spawned, int *size, int *rank, int *appnum);   /* outputs may be NULL */
int PMI2_Finalize(void);
int PMI2_Initialized(void);                       /* non-zero while initialised */
int PMI2_Abort(int flag, const char msg[]);       /* flag: whole job; exits with status 1 */

/* Dynamic processes. argvs[i] holds argcs[i] arguments (no command name);
 * info_keyval_vectors[i] points to info_keyval_sizes[i] pairs; preput_keyval_vector[k]
 * points to one pair; errors[] has one element per process (the sum of maxprocs). */
int PMI2_Job_Spawn(int count, const char *cmds[], int argcs[], const char **argvs[],
                   const int maxprocs[],
                   const int info_keyval_sizes[],
                   const PMI2_Keyval_t *info_keyval_vectors[],
                   int preput_keyval_size,
                   const PMI2_Keyval_t *preput_keyval_vector[],
                   char jobId[], int jobIdSize,
                   int errors[]);

/* The job */
int PMI2_Job_GetId(char jobid[], int jobid_size);
int PMI2_Job_GetRank(int *rank);
int PMI2_Info_GetSize(int *size);                 /* the job size, as MPICH's and Slurm's */
int PMI2_Job_Connect(const char jobid[], PMI2_Connect_comm_t *conn);
int PMI2_Job_Disconnect(const char jobid[]);

/* Key-value store. *vallen: the value's length, negative if truncated to maxvalue. */
int PMI2_KVS_Put(const char key[], const char value[]);
int PMI2_KVS_Fence(void);
int PMI2_KVS_Get(const char *jobid, int src_pmi_id, const char key[], char value[],
                 int maxvalue, int *vallen);

/* Node and job attributes (*found: 1 if it exists) */
int PMI2_Info_GetNodeAttr(const char name[], char value[], int valuelen, int *found,
                          int waitfor);
int PMI2_Info_GetNodeAttrIntArray(const char name[], int array[], int arraylen, int *outlen,
                                  int *found);
int PMI2_Info_PutNodeAttr(const char name[], const char value[]);
int PMI2_Info_GetJobAttr(const char name[], char value[], int valuelen, int *found);
int PMI2_Info_GetJobAttrIntArray(const char name[], int array[], int arraylen, int *outlen,
                                 int *found);

/* Name service (info_ptr is ignored) */
int PMI2_Nameserv_publish(const char service_name[], const void *info_ptr, const char port[]);
int PMI2_Nameserv_lookup(const char service_name[], const void *info_ptr, char port[],
                         int portLen);
int PMI2_Nameserv_unpublish(const char service_name[], const void *info_ptr);

#ifdef __cplusplus
}
#endif

#endif /* KAURI_PMI2_H_INCLUDED */
