"""The training-job flows the tools run over the targets and the doctor: deploy (plan, dry
run, submit and follow; auto-retry's loop), and diagnose a job (read through its target,
then the doctor's diagnosis). A layer above both: the doctor reasons about snapshots and
imports no target; the targets know nothing of the doctor."""
