# The mini flux1 on one CPU host (config/v6.0.yaml). The job shape in NVIDIA's convention;
# the hyperparameters are defaults.yaml merged with the pipeline config (MLREPRO_PARAMS).
export DGXSYSTEM=CPU
export DGXNNODES=1
export DGXNGPU=0
export WALLTIME=10
