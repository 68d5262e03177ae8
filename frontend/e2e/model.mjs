// A scripted OpenAI-compatible chat-completions server for the browser tests: the only stand-in
// the tests use (no language model can run here). Each request to /v1/chat/completions is
// answered with the next scripted step as a streamed completion: a tool call or a text. A step
// can be held: its answer waits until the test releases it (so that a turn stays in the middle
// of a task while the test looks at the UI).

import { createServer } from 'node:http';

/** A tool call step. */
export const call = (name, args) => ({ kind: 'call', name, args });
/** A text step (the end of a turn). */
export const text = (t) => ({ kind: 'text', text: t });

function sse(step, n) {
  if (step.kind === 'text') {
    return (
      `data: ${JSON.stringify({ choices: [{ delta: { content: step.text } }] })}\n\n` +
      `data: ${JSON.stringify({ choices: [{ delta: {}, finish_reason: 'stop' }] })}\n\ndata: [DONE]\n\n`
    );
  }
  const tc = { index: 0, id: `call_${n}`, type: 'function', function: { name: step.name, arguments: JSON.stringify(step.args ?? {}) } };
  return (
    `data: ${JSON.stringify({ choices: [{ delta: { tool_calls: [tc] } }] })}\n\n` +
    `data: ${JSON.stringify({ choices: [{ delta: {}, finish_reason: 'tool_calls' }] })}\n\ndata: [DONE]\n\n`
  );
}

/**
 * Starts the server on a free loopback port. Returns { baseUrl, push(...steps), hold(), seen,
 * stop() }: push queues steps; hold() makes the next step wait and returns release(); seen lists
 * the request bodies.
 */
export async function startModel() {
  const steps = [];
  const seen = [];
  let n = 0;
  const waiters = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', async () => {
      if (req.method === 'GET' && req.url.endsWith('/models')) {
        // the OpenAI list shape compatible servers answer (the settings' model picker)
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify({ object: 'list', data: [{ id: 'scripted', object: 'model' }, { id: 'scripted-large', object: 'model' }] }));
        return;
      }
      if (!req.url.endsWith('/chat/completions')) {
        res.writeHead(404).end();
        return;
      }
      try {
        seen.push(JSON.parse(body));
      } catch {
        seen.push(body);
      }
      const step = steps.shift();
      if (!step) {
        res.writeHead(500, { 'Content-Type': 'application/json' }).end(JSON.stringify({ error: { message: 'script exhausted' } }));
        return;
      }
      if (step.gate) await step.gate;
      n++;
      res.writeHead(200, { 'Content-Type': 'text/event-stream' });
      res.end(sse(step, n));
      const w = waiters.shift();
      w?.();
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    seen,
    push: (...s) => steps.push(...s.map((x) => ({ ...x }))),
    /** The next pushed step waits for the returned release(). */
    hold(step) {
      let release;
      const gate = new Promise((r) => (release = r));
      steps.push({ ...step, gate });
      return release;
    },
    /** Resolves when the count-th answer so far has been sent. */
    answered: (count) =>
      new Promise((r) => {
        const check = () => (n >= count ? r() : waiters.push(check));
        check();
      }),
    stop: () => new Promise((r) => server.close(() => r())),
  };
}
