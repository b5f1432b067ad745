#!/bin/sh
# env_only.sh: no MPI, no PMI traffic; only reads what the launcher put in the environment.
echo "env_only: rank=${PMI_RANK:-unset} size=${PMI_SIZE:-unset}"
