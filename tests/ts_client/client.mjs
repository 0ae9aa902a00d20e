// Drives the fsdp-eks MCP server as a TypeScript client does: the official SDK's Client
// over stdio, every tool's input and output schema compiled by strict Ajv (JSON Schema
// 2020-12, MCP's dialect), then a dry run, a list and a failing call, each result's
// structuredContent validated against the tool's outputSchema (the SDK validates it
// too, and throws on a mismatch). Prints one JSON report on stdout.
// Usage: node client.mjs '<{"command", "args", "cwd", "env"}>'
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import Ajv2020 from "ajv/dist/2020.js";

const server = JSON.parse(process.argv[2]);
const ajv = new Ajv2020({ strict: true, allErrors: true });
const report = { schemaErrors: [], calls: {} };

const transport = new StdioClientTransport({
  command: server.command,
  args: server.args,
  cwd: server.cwd,
  env: server.env,
  stderr: "inherit",
});
const client = new Client({ name: "fsdp-eks-ts-test", version: "1.0.0" });
await client.connect(transport);
report.serverVersion = client.getServerVersion();
report.capabilities = client.getServerCapabilities();

const { tools } = await client.listTools();
const outputValidators = {};
for (const tool of tools) {
  for (const [kind, schema] of [["input", tool.inputSchema], ["output", tool.outputSchema]]) {
    if (!schema) {
      report.schemaErrors.push(`${tool.name}: no ${kind} schema`);
      continue;
    }
    try {
      const validate = ajv.compile(schema);
      if (kind === "output") outputValidators[tool.name] = validate;
    } catch (error) {
      report.schemaErrors.push(`${tool.name} ${kind}: ${error.message}`);
    }
  }
}
report.tools = tools.map((tool) => tool.name);

async function call(label, name, args) {
  let result;
  try {
    result = await client.callTool({ name, arguments: args });
  } catch (error) {
    report.calls[label] = { thrown: String(error.message || error) };
    return;
  }
  const validate = outputValidators[name];
  const structured = result.structuredContent;
  const valid = structured === undefined ? null : validate ? validate(structured) : false;
  report.calls[label] = {
    isError: Boolean(result.isError),
    text: result.content?.[0]?.text ?? "",
    structuredContent: structured ?? null,
    valid,
    errors: valid === false ? validate?.errors ?? "no validator" : null,
  };
}

await call("dry_run", "deploy_training_job", {
  job_name: "ts-dry",
  dry_run: true,
  gpu_per_node: 1,
  local: { runs_dir: "runs" },
});
await call("list", "list_training_jobs", {});
await call("failing", "get_training_job", { job_name: "no-such-job" });
await client.close();
process.stdout.write(JSON.stringify(report));
