# The mini llama31_8b on one CPU host (the embedded default). The job shape in NVIDIA's convention;
# the hyperparameters are defaults.yaml merged with the pipeline config (MLREPRO_PARAMS).
export DGXSYSTEM=CPU
export DGXNNODES=1
export DGXNGPU=0
export WALLTIME=10
