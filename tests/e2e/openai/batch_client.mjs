// A user's script against sdgd's Batch API, written with the official
// OpenAI SDK (package.json pins it): tests/e2e/batch_api_test.cc runs it and
// checks what it prints. Each scenario prints "created BATCH_ID" once its
// batch exists, then one line "result JSON" with what it saw.
//
//   node batch_client.mjs run FILE ENDPOINT        upload, create, poll, download
//   node batch_client.mjs cancel FILE ENDPOINT     ... cancel once a line is done
//   node batch_client.mjs list FILE ENDPOINT N     N batches, then list them all
//   node batch_client.mjs errors FILE OTHER_BATCH  the SDK's typed errors
//
// OPENAI_BASE_URL and OPENAI_API_KEY say where and who, as for any script.
import fs from 'node:fs';
import OpenAI from 'openai';

const [scenario, ...args] = process.argv.slice(2);
// Retries carry a poll through a restart of sdgd (connection refused).
const client = new OpenAI({ maxRetries: 8, timeout: 120 * 1000 });
const terminal = new Set(['completed', 'failed', 'expired', 'cancelled']);

function say(tag, value) {
  process.stdout.write(`${tag} ${typeof value === 'string' ? value : JSON.stringify(value)}\n`);
}

async function upload(file) {
  return client.files.create({ file: fs.createReadStream(file), purpose: 'batch' });
}

async function create(file, endpoint) {
  const input = await upload(file);
  const batch = await client.batches.create({
    input_file_id: input.id,
    endpoint,
    completion_window: '24h',
    metadata: { scenario },
  });
  say('created', batch.id);
  return { input, batch };
}

// The client's poll: what a script does while it waits for its batch.
async function pollUntil(id, done) {
  for (;;) {
    const batch = await client.batches.retrieve(id);
    if (done(batch)) return batch;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function contents(id) {
  if (!id) return null;
  const response = await client.files.content(id);
  return response.text();
}

async function finish(input, batch, extra = {}) {
  const output = await contents(batch.output_file_id);
  const errors = await contents(batch.error_file_id);
  const output_file = batch.output_file_id ? await client.files.retrieve(batch.output_file_id) : null;
  const input_content = await contents(input.id);
  say('result', { input, input_content, batch, output, errors, output_file, ...extra });
}

async function run(file, endpoint) {
  const { input, batch } = await create(file, endpoint);
  await finish(input, await pollUntil(batch.id, (b) => terminal.has(b.status)));
}

async function cancel(file, endpoint) {
  const { input, batch } = await create(file, endpoint);
  await pollUntil(batch.id, (b) => b.request_counts.completed > 0 || terminal.has(b.status));
  const cancelling = await client.batches.cancel(batch.id);
  await finish(input, await pollUntil(batch.id, (b) => terminal.has(b.status)), { cancelling });
}

async function list(file, endpoint, count) {
  const made = [];
  for (let i = 0; i < Number(count); i++) made.push((await create(file, endpoint)).batch.id);
  const listed = [];
  // Auto-pagination, two a page.
  for await (const batch of client.batches.list({ limit: 2 })) listed.push(batch.id);
  const files = [];
  for await (const f of client.files.list({ purpose: 'batch' })) files.push(f.id);
  const first = await client.batches.list({ limit: 2 });
  say('result', { made, listed, files, first_page: first.data.map((b) => b.id), has_more: first.has_more });
}

// What each call raised: the SDK's error class and HTTP status.
async function raised(call) {
  try {
    await call();
    return { error: null };
  } catch (error) {
    return { error: error.constructor.name, status: error.status, message: error.message };
  }
}

async function errors(file, otherBatch) {
  const stranger = new OpenAI({ apiKey: 'not-a-token', maxRetries: 0 });
  const results = {
    wrong_token: await raised(() => stranger.batches.list()),
    other_tenants_batch: await raised(() => client.batches.retrieve(otherBatch)),
    unknown_file: await raised(() => client.files.retrieve('file-nope')),
    unknown_input: await raised(() => client.batches.create({
      input_file_id: 'file-nope', endpoint: '/v1/chat/completions', completion_window: '24h',
    })),
    bad_endpoint: await raised(async () => client.batches.create({
      input_file_id: (await upload(file)).id, endpoint: '/v1/images', completion_window: '24h',
    })),
    bad_purpose: await raised(() => client.files.create({
      file: fs.createReadStream(file), purpose: 'fine-tune',
    })),
    deleted: await raised(async () => {
      const f = await upload(file);
      const gone = await client.files.delete(f.id);
      if (!gone.deleted) throw new Error('not deleted');
      await client.files.retrieve(f.id);
    }),
  };
  say('result', results);
}

const scenarios = { run, cancel, list, errors };
if (!scenarios[scenario]) {
  console.error(`unknown scenario ${scenario}; one of ${Object.keys(scenarios).join(', ')}`);
  process.exit(2);
}
await scenarios[scenario](...args);
