// A shard worker on the OpenTelemetry JS SDK: one run of CALLS logical calls, each a first
// attempt answered 429 and a retry that succeeds, exported by one of the three JS OTLP
// trace exporters. Usage: node send_spans.js json|proto|grpc ENDPOINT RUN_ID BASE_MS CALLS
'use strict';
const api = require('@opentelemetry/api');
const { BasicTracerProvider, BatchSpanProcessor } = require('@opentelemetry/sdk-trace-base');
const { resourceFromAttributes } = require('@opentelemetry/resources');

const [kind, endpoint, runId, baseArg, callsArg] = process.argv.slice(2);
const packages = {
  json: '@opentelemetry/exporter-trace-otlp-http',
  proto: '@opentelemetry/exporter-trace-otlp-proto',
  grpc: '@opentelemetry/exporter-trace-otlp-grpc',
};
const { OTLPTraceExporter } = require(packages[kind]);
const exporter = new OTLPTraceExporter({ url: kind === 'grpc' ? endpoint : `${endpoint}/v1/traces` });
const resource = resourceFromAttributes({
  'service.name': 'js-worker',
  'tpmledger.run.id': runId,
  'tpmledger.shard.id': '0',
  'tpmledger.shard.count': 1,
  'tpmledger.concurrency.cap': 4,
});
const provider = new BasicTracerProvider({
  resource,
  spanProcessors: [new BatchSpanProcessor(exporter, { maxExportBatchSize: 64 })],
});
const tracer = provider.getTracer('js-worker');
const base = Number(baseArg);
for (let call = 0; call < Number(callsArg); call++) {
  for (let resend = 0; resend < 2; resend++) {
    const start = base + call * 1000 + resend * 500;
    const span = tracer.startSpan('chat gpt-x', {
      kind: api.SpanKind.CLIENT,
      startTime: start,
      attributes: {
        'gen_ai.operation.name': 'chat',
        'gen_ai.request.model': 'gpt-x',
        'gen_ai.provider.name': 'openai',
        'tpmledger.call.id': `call-${call}`,
        'http.request.resend_count': resend,
      },
    });
    if (resend === 0) {
      span.setAttribute('http.response.status_code', 429);
      span.setAttribute('error.type', '429');
      span.setStatus({ code: api.SpanStatusCode.ERROR });
    } else {
      span.setAttributes({
        'http.response.status_code': 200,
        'gen_ai.usage.input_tokens': 100 + call,
        'gen_ai.usage.output_tokens': 40 + (call % 7),
        'gen_ai.response.time_to_first_chunk': 0.125,
        'gen_ai.response.finish_reasons': ['stop'],
      });
    }
    span.end(start + 400);
  }
}
provider
  .forceFlush()
  .then(() => provider.shutdown())
  .then(
    () => console.log(`${kind}: exported`),
    (error) => {
      console.error(`${kind}: export failed`, error);
      process.exit(1);
    },
  );
