"""Beam's local job service (``local_job_service_main``, the same flags), with each job run by as
many SDK workers as its ``--direct_num_workers`` asks: Beam's runs a job's bundles on one worker
whatever the option says, where Dataflow spreads them over its workers. The rehearsal starts this."""

from __future__ import annotations

import logging
import signal
import sys

from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.portability.api import beam_job_api_pb2
from apache_beam.runners.portability import local_job_service, local_job_service_main
from apache_beam.runners.portability.fn_api_runner import fn_runner


class Runner(fn_runner.FnApiRunner):
    """FnApiRunner whose runner-API entry takes its worker count from the job's options (its
    ``run_pipeline`` does; ``run_via_runner_api``, the job service's, keeps one)."""

    def run_via_runner_api(self, pipeline_proto, options):
        self._num_workers = max(
            1, int(options.view_as(DirectOptions).direct_num_workers or 1)
        )  # a string here
        return super().run_via_runner_api(pipeline_proto, options)


def _invoke_runner(job: local_job_service.BeamJob):
    job.set_state(beam_job_api_pb2.JobState.RUNNING)
    return Runner(provision_info=job._provision_info).run_via_runner_api(
        job._pipeline_proto, job.pipeline_options()
    )


if __name__ == "__main__":
    local_job_service.BeamJob._invoke_runner = _invoke_runner
    signal.signal(signal.SIGTERM, lambda *args: sys.exit(0))
    logging.basicConfig(level=logging.INFO)
    local_job_service_main.run(sys.argv[1:])
