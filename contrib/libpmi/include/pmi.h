/*
 * pmi.h: the PMI-1 client API of Kauri's libpmi.so (contrib/libpmi).
 *
 * Declarations of the classic PMI-1 interface with its usual constant values, so that
 * programs written for MPICH's or Slurm's pmi.h build against it unchanged. The library
 * talks the PMI-1 wire protocol to the server named by PMI_FD, or PMI_PORT and PMI_ID
 * (Kauri, mpiexec.hydra, Slurm's pmi2 plugin); with neither set, the process is a singleton
 * (rank 0 of 1, KVS in memory). See docs/libpmi.md.
 *
 * Beyond MPICH's client: PMI_Get_clique_size/PMI_Get_clique_ranks (from
 * PMI_process_mapping), values that may contain spaces, and PMI_KVS_Get_value_length_max
 * chosen so that every request line stays within 1024 bytes.
 *
 * Buffer sizes count the terminating NUL. Calls are thread-safe (serialised).
 */
#ifndef KAURI_PMI_H_INCLUDED
#define KAURI_PMI_H_INCLUDED

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes */
#define PMI_SUCCESS                  0
#define PMI_FAIL                    -1
#define PMI_ERR_INIT                 1
#define PMI_ERR_NOMEM                2
#define PMI_ERR_INVALID_ARG          3
#define PMI_ERR_INVALID_KEY          4
#define PMI_ERR_INVALID_KEY_LENGTH   5
#define PMI_ERR_INVALID_VAL          6
#define PMI_ERR_INVALID_VAL_LENGTH   7
#define PMI_ERR_INVALID_LENGTH       8
#define PMI_ERR_INVALID_NUM_ARGS     9
#define PMI_ERR_INVALID_ARGS        10
#define PMI_ERR_INVALID_NUM_PARSED  11
#define PMI_ERR_INVALID_KEYVALP     12
#define PMI_ERR_INVALID_SIZE        13

/* Booleans */
typedef int PMI_BOOL;
#define PMI_TRUE  1
#define PMI_FALSE 0

/* One key and value of an info or preput vector (spawn). */
typedef struct PMI_keyval_t {
    const char *key;
    char *val;
} PMI_keyval_t;

/* Session */
int PMI_Init(int *spawned);             /* *spawned: PMI_TRUE if started by a spawn */
int PMI_Initialized(PMI_BOOL *initialized);
int PMI_Finalize(void);
int PMI_Abort(int exit_code, const char error_msg[]);   /* does not return */

/* The job */
int PMI_Get_size(int *size);
int PMI_Get_rank(int *rank);
int PMI_Get_universe_size(int *size);   /* the job size when the server does not know */
int PMI_Get_appnum(int *appnum);
int PMI_Get_clique_size(int *size);     /* processes on this node */
int PMI_Get_clique_ranks(int ranks[], int length);      /* their ranks, ascending */
int PMI_Get_id(char id_str[], int length);              /* = the KVS name */
int PMI_Get_kvs_domain_id(char id_str[], int length);   /* = the KVS name */
int PMI_Get_id_length_max(int *length);

/* Barrier: also the point after which every put is visible to every get */
int PMI_Barrier(void);

/* Key-value store */
int PMI_KVS_Get_my_name(char kvsname[], int length);
int PMI_KVS_Get_name_length_max(int *length);
int PMI_KVS_Get_key_length_max(int *length);
int PMI_KVS_Get_value_length_max(int *length);
int PMI_KVS_Put(const char kvsname[], const char key[], const char value[]);
int PMI_KVS_Commit(const char kvsname[]);
int PMI_KVS_Get(const char kvsname[], const char key[], char value[], int length);

/* Name service (port: a buffer of 256 bytes for lookups) */
int PMI_Publish_name(const char service_name[], const char port[]);
int PMI_Unpublish_name(const char service_name[]);
int PMI_Lookup_name(const char service_name[], char port[]);

/* Dynamic processes: errors[] has one element per process (the sum of maxprocs) */
int PMI_Spawn_multiple(int count,
                       const char *cmds[],
                       const char **argvs[],
                       const int maxprocs[],
                       const int info_keyval_sizesp[],
                       const PMI_keyval_t *info_keyval_vectors[],
                       int preput_keyval_size,
                       const PMI_keyval_t preput_keyval_vector[],
                       int errors[]);

/* Command-line helpers: this library has no PMI options, so they parse nothing. */
int PMI_Parse_option(int num_args, char *args[], int *num_parsed, PMI_keyval_t **keyvalp,
                     int *size);
int PMI_Args_to_keyval(int *argcp, char *((*argvp)[]), PMI_keyval_t **keyvalp, int *size);
int PMI_Free_keyvals(PMI_keyval_t keyvalp[], int size);
int PMI_Get_options(char *str, int *length);

#ifdef __cplusplus
}
#endif

#endif /* KAURI_PMI_H_INCLUDED */
