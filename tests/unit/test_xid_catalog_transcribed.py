"""Whose fault each XID is, checked against NVIDIA's own catalog, not against the table
under test (skills/job_doctor/node_faults.py XIDS).

The rows below are typed from NVIDIA's "Analyzing Xid Errors with the Xid Catalog"
(docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, the Ampere-and-newer
catalog, as read on 2026-12-06): number, mnemonic, the catalog's immediate resolution
bucket, and a few words of its trigger text. The fault column is this file's reading of
that row: "job" where the catalog says the application is at fault and the GPU stays
healthy (RESTART_APP / IGNORE with "user application" in the text); "node" where the
catalog's action resets the GPU or the node (RESET_GPU, RESTART_BM, WORKFLOW_XID_48,
WORKFLOW_NVLINK_ERR), or where its text says the GPU should be reset (63, 92, 94: ECC
activity the row remapper finishes only at a GPU reset, per NVIDIA's "GPU Memory Error
Management" note). A row of the product's table missing here fails: transcribe it first.
"""

from __future__ import annotations

from typing import NamedTuple

import pytest

from skills.job_doctor.diagnose import Signal, _match
from skills.job_doctor.failure_signatures import CODES
from skills.job_doctor.node_faults import XIDS, xid_of


class Row(NamedTuple):
    number: int
    mnemonic: str
    immediate: str  # the catalog's "Resolution Bucket (Immediate Action)"
    says: str  # a few words of the catalog's description / trigger conditions
    fault: str  # this file's reading of the row (see the module docstring)


CATALOG = (
    Row(13, "ROBUST_CHANNEL_GR_EXCEPTION", "RESTART_APP", "general user application faults", "job"),
    Row(
        31,
        "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT",
        "RESTART_APP",
        "Typically these are application-level bugs",
        "job",
    ),
    Row(
        43,
        "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR",
        "IGNORE",
        "a user application hits a software induced fault ... The GPU remains in a healthy state",
        "job",
    ),
    Row(
        45,
        "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
        "WORKFLOW_XID_45",
        "the user application aborts and the kernel driver tears down the GPU application",
        "job",
    ),
    Row(
        48,
        "ROBUST_CHANNEL_GPU_ECC_DBE",
        "WORKFLOW_XID_48",
        "A GPU reset or node reboot is needed to clear this error",
        "node",
    ),
    Row(62, "PMU_HALT_ERROR", "RESET_GPU", "Internal micro-controller halt", "node"),
    Row(63, "INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE", "GPU memory remapping event", "node"),
    Row(64, "INFOROM_DRAM_RETIREMENT_FAILURE", "RESET_GPU", "GPU memory remapping failure", "node"),
    Row(
        74,
        "NVLINK_ERROR",
        "WORKFLOW_NVLINK_ERR",
        "A GPU reset or node reboot is needed to clear this error",
        "node",
    ),
    Row(
        79,
        "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
        "RESTART_BM",
        "GPU has fallen off the bus",
        "node",
    ),
    Row(92, "EXCESSIVE_SBE_INTERRUPTS", "IGNORE", "High single-bit ECC error rate", "node"),
    Row(
        94,
        "ROBUST_CHANNEL_CONTAINED_ERROR",
        "RESTART_APP",
        "It is recommended to reset the GPU when convenient",
        "node",
    ),
    Row(
        95,
        "ROBUST_CHANNEL_UNCONTAINED_ERROR",
        "RESET_GPU",
        "the affected GPU must be reset before applications can restart",
        "node",
    ),
    Row(119, "GSP_RPC_TIMEOUT", "RESET_GPU", "GSP RPC Timeout", "node"),
    Row(120, "GSP_ERROR", "RESET_GPU", "GSP Error", "node"),
    Row(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "RESET_GPU", "ECC Unrecovered Error", "node"),
)
BY_NUMBER = {row.number: row for row in CATALOG}
CODE = {"node": "gpu_hardware_fault", "job": "gpu_application_fault"}
RESETS = ("RESET_GPU", "RESTART_BM", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR")


def kernel_line(number: int) -> str:
    return f"NVRM: Xid (PCI:0000:a8:00): {number}, pid=2211, name=python, Ch 00000008"


def test_every_xid_the_product_knows_is_transcribed_from_the_catalog():
    assert sorted(x.number for x in XIDS) == sorted(BY_NUMBER)


def test_the_transcription_reads_the_catalogs_reset_actions_as_the_nodes_fault():
    """A guard on this file's own reading: every row whose immediate action resets the GPU
    or the machine is the node's; no application row is."""
    for row in CATALOG:
        if row.immediate in RESETS:
            assert row.fault == "node", row
        if "application" in row.says and "reset" not in row.says:
            assert row.fault == "job", row


@pytest.mark.parametrize("row", CATALOG, ids=[f"xid{r.number}-{r.fault}" for r in CATALOG])
def test_each_xid_is_whose_fault_the_catalog_says(row):
    signal = Signal("p", "log", "", kernel_line(row.number), "log")
    found = _match(signal)
    assert found is not None and found.code == CODE[row.fault], row
    assert CODES[found.code].quarantine is (row.fault == "node")
    xid = xid_of([signal.text])
    assert xid is not None and xid.fault == row.fault
