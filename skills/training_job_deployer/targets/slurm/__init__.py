"""The Slurm target: one sbatch job running srun torchrun on every node."""
