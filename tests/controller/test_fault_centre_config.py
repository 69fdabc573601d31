"""The controller's fault centre follows the operator's files in --fault-config-dir: the
relation rules and their timeouts, and the manual-separation policy, at start and on change."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.controller.test_controller_job_controller import FakeClock
from trainguard.controller import service
from trainguard.controller.fault_centre.relation_config import Strategy
from trainguard.proto import grpc_security

POLICY = "separate:\n  fault_threshold: {threshold}\nrelease:\n  fault_free_hours: -1\n"


def test_the_fault_centre_takes_the_operators_files_and_their_changes(tmp_path: Path) -> None:
    config = tmp_path / "fault-config"
    config.mkdir()
    (config / "relationFaultCustomization.json").write_text(json.dumps([
        {"TriggerFault": "8C1F860B", "RelationFaults": ["81078603"],
         "FaultStrategy": "SubHealth"}]))
    policy = config / "manually_separate_policy.conf"
    policy.write_text(POLICY.format(threshold=2))

    async def scenario() -> tuple[list[tuple[str, Strategy]], int, float | None, int]:
        controller = service.ControllerService(service.ControllerSettings(
            run_root=tmp_path / "controller", fault_config_dir=config,
            security=grpc_security.ServerSecurity(insecure=True)), clock=FakeClock())
        await controller.start("127.0.0.1:0")
        try:
            assert controller._intake is not None
            centre = controller._intake.centre
            rules = [(rule.trigger, rule.strategy) for rule in centre.relation.rules]
            at_start = (centre.manual.policy.fault_threshold, centre.manual.policy.fault_free)
            policy.write_text(POLICY.format(threshold=7))
            async with asyncio.timeout(20):
                while centre.manual.policy.fault_threshold != 7:
                    await asyncio.sleep(0.05)
            return rules, *at_start, centre.manual.policy.fault_threshold
        finally:
            await controller.stop()

    rules, threshold, fault_free, changed = asyncio.run(scenario())
    assert rules == [("8C1F860B", Strategy.SUB_HEALTH)]
    assert (threshold, fault_free) == (2, None)
    assert changed == 7
