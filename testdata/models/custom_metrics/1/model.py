"""custom_metrics: echoes IN and records it in three custom metric
families (a counter, a gauge and a histogram), as a model instrumented
for Triton's /metrics would. The families are kept: as in Triton, a
metric whose family was deleted refuses every operation."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        labels = {"model": args["model_name"]}
        self.families = [
            pb_utils.MetricFamily(name="custom_requests_total", description="Requests the model executed",
                                  kind=pb_utils.MetricFamily.COUNTER),
            pb_utils.MetricFamily(name="custom_last_in", description="The last IN value an instance saw",
                                  kind=pb_utils.MetricFamily.GAUGE),
            pb_utils.MetricFamily(name="custom_in", description="IN values",
                                  kind=pb_utils.MetricFamily.HISTOGRAM),
        ]
        self.requests = self.families[0].Metric(labels=labels)
        self.last = self.families[1].Metric(labels=labels)
        self.values = self.families[2].Metric(labels=labels, buckets=[1.0, 10.0, 100.0])

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            v = float(value[0])
            self.requests.increment(1)
            self.last.set(v)
            self.values.observe(v)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]))
        return responses
