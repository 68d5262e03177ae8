import { describe, expect, it, vi } from 'vitest';
import { ApiError, Client, type Agent } from './api';
import { OffsetMismatch } from './upload';

interface Call {
  url: string;
  init: RequestInit;
}

/** A fetch stand-in that records calls and answers from a list. */
function fakeFetch(...responses: Array<Response | Error>) {
  const calls: Call[] = [];
  const fn = vi.fn(async (input: RequestInfo | URL, init?: RequestInit) => {
    calls.push({ url: String(input), init: init ?? {} });
    const next = responses.shift();
    if (!next) throw new Error('unexpected request');
    if (next instanceof Error) throw next;
    return next;
  });
  return { fetch: fn as unknown as typeof fetch, calls };
}

const json = (status: number, body: unknown) =>
  new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } });

const agent: Agent = {
  id: 'a 1/x',
  name: 'Researcher',
  computer: 'vm',
  allowHostEnvironment: true,
  createdAt: '2026-11-29T17:00:00Z',
  updatedAt: '2026-11-29T17:00:00Z',
};

const headersOf = (c: Call) => c.init.headers as Record<string, string>;

describe('Client routes', () => {
  const cases: Array<{
    name: string;
    call: (c: Client) => Promise<unknown>;
    response: Response;
    method: string;
    path: string;
    body?: unknown;
    result: unknown;
  }> = [
    {
      name: 'health',
      call: (c) => c.health(),
      response: json(200, { ok: true, version: '0.1.0' }),
      method: 'GET',
      path: '/api/health',
      result: { ok: true, version: '0.1.0' },
    },
    {
      name: 'login',
      call: (c) => c.login('admin', 'pw'),
      response: json(200, { user: { id: 'u1', username: 'admin', role: 'admin' } }),
      method: 'POST',
      path: '/api/auth/login',
      body: { username: 'admin', password: 'pw' },
      result: { id: 'u1', username: 'admin', role: 'admin' },
    },
    {
      name: 'logout',
      call: (c) => c.logout(),
      response: new Response(null, { status: 204 }),
      method: 'POST',
      path: '/api/auth/logout',
      result: undefined,
    },
    {
      name: 'me',
      call: (c) => c.me(),
      response: json(200, { user: { id: 'u1', username: 'admin', role: 'admin' } }),
      method: 'GET',
      path: '/api/auth/me',
      result: { id: 'u1', username: 'admin', role: 'admin' },
    },
    {
      name: 'list agents',
      call: (c) => c.listAgents(),
      response: json(200, { agents: [agent] }),
      method: 'GET',
      path: '/api/app/agents',
      result: [agent],
    },
    {
      name: 'list agents null is empty',
      call: (c) => c.listAgents(),
      response: json(200, { agents: null }),
      method: 'GET',
      path: '/api/app/agents',
      result: [],
    },
    {
      name: 'create agent',
      call: (c) => c.createAgent('Researcher'),
      response: json(201, agent),
      method: 'POST',
      path: '/api/app/agents',
      body: { name: 'Researcher' },
      result: agent,
    },
    {
      name: 'get agent escapes the id',
      call: (c) => c.getAgent('a 1/x'),
      response: json(200, agent),
      method: 'GET',
      path: '/api/app/agents/a%201%2Fx',
      result: agent,
    },
    {
      name: 'rename agent',
      call: (c) => c.renameAgent('a1', 'New'),
      response: json(200, { ...agent, name: 'New' }),
      method: 'PATCH',
      path: '/api/app/agents/a1',
      body: { name: 'New' },
      result: { ...agent, name: 'New' },
    },
    {
      name: 'delete agent',
      call: (c) => c.deleteAgent('a1'),
      response: new Response(null, { status: 204 }),
      method: 'DELETE',
      path: '/api/app/agents/a1',
      result: undefined,
    },
    {
      name: 'delete agent with its data',
      call: (c) => c.deleteAgent('a1', { removeDesktop: true, deleteData: true }),
      response: new Response(null, { status: 204 }),
      method: 'DELETE',
      path: '/api/app/agents/a1',
      body: { removeDesktop: true, deleteData: true },
      result: undefined,
    },
    {
      name: 'what deleting concerns',
      call: (c) => c.agentDeletion('a/1'),
      response: json(200, { agentId: 'a/1', desktops: [], volumes: [], sizeBytes: 0 }),
      method: 'GET',
      path: '/api/app/agents/a%2F1/deletion',
      result: { agentId: 'a/1', desktops: [], volumes: [], sizeBytes: 0 },
    },
    {
      name: 'what deleting concerns, without measuring',
      call: (c) => c.agentDeletion('a/1', false),
      response: json(200, { agentId: 'a/1', desktops: [], volumes: [], sizeBytes: -1 }),
      method: 'GET',
      path: '/api/app/agents/a%2F1/deletion?sizes=0',
      result: { agentId: 'a/1', desktops: [], volumes: [], sizeBytes: -1 },
    },
    {
      name: 'working directory',
      call: (c) => c.setWorkDir('a1', 'projects/x'),
      response: json(200, { agent, rebuilt: false }),
      method: 'PUT',
      path: '/api/app/agents/a1/workdir',
      body: { workdir: 'projects/x' },
      result: { agent, rebuilt: false },
    },
    {
      name: 'sandbox binding',
      call: (c) => c.setLazyInit('a1', false),
      response: json(200, { ...agent, lazyInit: false }),
      method: 'PUT',
      path: '/api/app/agents/a1/lazy-init',
      body: { lazyInit: false },
      result: { ...agent, lazyInit: false },
    },
    {
      name: 'computer plan',
      call: (c) => c.computerPlan('a1'),
      response: json(200, { agentId: 'a1', next: { computer: 'vm' } }),
      method: 'GET',
      path: '/api/app/agents/a1/computer-plan',
      result: { agentId: 'a1', next: { computer: 'vm' } },
    },
    {
      name: 'desktop folder changes',
      call: (c) => c.desktopFilesChanged('a1', 'downloads', 25),
      response: json(200, { changed: true }),
      method: 'GET',
      path: '/api/app/agents/a1/files/changes?dir=downloads&timeout=25',
      result: true,
    },
    {
      name: 'agent opened',
      call: (c) => c.agentOpened('a1'),
      response: json(200, { started: true, state: 'running' }),
      method: 'POST',
      path: '/api/app/agents/a1/opened',
      result: { started: true, state: 'running' },
    },
    {
      name: 'host',
      call: (c) => c.host(),
      response: json(200, { nodeId: 'local', screenControl: false }),
      method: 'GET',
      path: '/api/app/admin/host',
      result: { nodeId: 'local', screenControl: false },
    },
    {
      name: 'host screen control',
      call: (c) => c.setHostScreenControl('r1', true),
      response: json(200, { nodeId: 'local', screenControl: true }),
      method: 'PUT',
      path: '/api/app/admin/host',
      body: { requestId: 'r1', screenControl: true },
      result: { nodeId: 'local', screenControl: true },
    },
    {
      name: 'admin stops any desktop',
      call: (c) => c.adminDesktopAction('vm-1/x', 'stop'),
      response: json(200, { id: 'vm-1/x', state: 'stopped' }),
      method: 'POST',
      path: '/api/app/admin/local-vm/instances/vm-1%2Fx/stop',
      result: { id: 'vm-1/x', state: 'stopped' },
    },
    {
      name: 'admin removes a desktop in use anyway',
      call: (c) => c.adminDesktopAction('vm-1', 'remove', true),
      response: json(200, { id: 'vm-1', state: 'absent' }),
      method: 'POST',
      path: '/api/app/admin/local-vm/instances/vm-1/remove',
      body: { force: true },
      result: { id: 'vm-1', state: 'absent' },
    },
    {
      name: 'leftovers',
      call: (c) => c.leftovers(),
      response: json(200, { containers: [], volumes: [], images: [] }),
      method: 'GET',
      path: '/api/app/admin/housekeeping',
      result: { containers: [], volumes: [], images: [] },
    },
    {
      name: 'clean leftovers',
      call: (c) => c.cleanLeftovers({ containers: ['c1'], volumes: [], images: ['i1'] }),
      response: json(200, { outcomes: [], leftovers: { containers: [], volumes: [], images: [] } }),
      method: 'POST',
      path: '/api/app/admin/housekeeping/clean',
      body: { containers: ['c1'], volumes: [], images: ['i1'] },
      result: { outcomes: [], leftovers: { containers: [], volumes: [], images: [] } },
    },
    {
      name: 'choose a fixed desktop',
      call: (c) => c.chooseDesktop('a1', 'compose-one'),
      response: json(200, { agentId: 'a1' }),
      method: 'PUT',
      path: '/api/app/agents/a1/local-vm/image',
      body: { desktop: 'compose-one' },
      result: { agentId: 'a1' },
    },
    {
      name: 'computer selection',
      call: (c) => c.setComputerSelection('a1', { computer: 'browser', allowHostEnvironment: true }),
      response: json(200, { ...agent, computer: 'browser', allowHostEnvironment: false }),
      method: 'PUT',
      path: '/api/app/agents/a1/computer-selection',
      body: { computer: 'browser', allowHostEnvironment: true },
      // The server's answer is returned as is: it cleared the flag.
      result: { ...agent, computer: 'browser', allowHostEnvironment: false },
    },
    {
      name: 'doctor',
      call: (c) => c.doctor(),
      response: json(200, { checks: [{ name: 'engine', status: 'ok', detail: 'podman 4.3.1', fix: '' }] }),
      method: 'GET',
      path: '/api/app/admin/doctor',
      result: [{ name: 'engine', status: 'ok', detail: 'podman 4.3.1', fix: '' }],
    },
    {
      name: 'model settings',
      call: (c) => c.getModel(),
      response: json(200, { baseUrl: 'u', model: 'm', hasApiKey: true, configured: true, source: 'settings' }),
      method: 'GET',
      path: '/api/app/admin/model',
      result: { baseUrl: 'u', model: 'm', hasApiKey: true, configured: true, source: 'settings' },
    },
    {
      name: 'save model settings',
      call: (c) => c.setModel({ baseUrl: 'u', model: 'm', apiKey: 'k' }),
      response: json(200, { baseUrl: 'u', model: 'm', hasApiKey: true, configured: true, source: 'settings' }),
      method: 'PUT',
      path: '/api/app/admin/model',
      body: { baseUrl: 'u', model: 'm', apiKey: 'k' },
      result: { baseUrl: 'u', model: 'm', hasApiKey: true, configured: true, source: 'settings' },
    },
    {
      name: 'agent model',
      call: (c) => c.getAgentModel('a/1'),
      response: json(200, { baseUrl: '', model: 'm' }),
      method: 'GET',
      path: '/api/app/agents/a%2F1/model',
      result: { baseUrl: '', model: 'm' },
    },
    {
      name: 'save agent model',
      call: (c) => c.setAgentModel('a1', { baseUrl: 'u', model: 'm', apiKey: '' }),
      response: json(200, { baseUrl: 'u', model: 'm', hasApiKey: false }),
      method: 'PUT',
      path: '/api/app/agents/a1/model',
      body: { baseUrl: 'u', model: 'm', apiKey: '' },
      result: { baseUrl: 'u', model: 'm', hasApiKey: false },
    },
    {
      name: 'local vm status',
      call: (c) => c.localVM(),
      response: json(200, { preparing: false }),
      method: 'GET',
      path: '/api/app/admin/local-vm',
      result: { preparing: false },
    },
    {
      name: 'prepare image',
      call: (c) => c.prepareImage('cursor'),
      response: json(202, { imageKey: 'cursor', running: true }),
      method: 'POST',
      path: '/api/app/admin/local-vm/prepare',
      body: { imageKey: 'cursor' },
      result: { imageKey: 'cursor', running: true },
    },
    {
      name: 'vm policy',
      call: (c) => c.setVMPolicy('shared', 3),
      response: json(200, { isolation: 'shared', maxInstances: 3, idleStopMinutes: 5 }),
      method: 'PUT',
      path: '/api/app/admin/local-vm/policy',
      body: { isolation: 'shared', maxInstances: 3 },
      result: { isolation: 'shared', maxInstances: 3, idleStopMinutes: 5 },
    },
    {
      name: 'image sources',
      call: (c) => c.setImageSources({ cursor: { image: 'mirror.example/universal', digest: '' } }),
      response: json(200, { baseSource: 'auto' }),
      method: 'PUT',
      path: '/api/app/admin/local-vm/image-sources',
      body: { cursor: { image: 'mirror.example/universal', digest: '' } },
      result: { baseSource: 'auto' },
    },
    {
      name: 'idle policy',
      call: (c) => c.setIdlePolicy('req-1', 0),
      response: json(200, { isolation: 'shared', maxInstances: 3, idleStopMinutes: 0 }),
      method: 'PUT',
      path: '/api/app/admin/local-vm/idle-policy',
      body: { requestId: 'req-1', idleStopMinutes: 0 },
      result: { isolation: 'shared', maxInstances: 3, idleStopMinutes: 0 },
    },
    {
      name: 'idle policy with a pause',
      call: (c) => c.setIdlePolicy('req-2', 30, undefined, 5),
      response: json(200, { isolation: 'shared', maxInstances: 3, idleStopMinutes: 30, pauseAfterMinutes: 5 }),
      method: 'PUT',
      path: '/api/app/admin/local-vm/idle-policy',
      body: { requestId: 'req-2', idleStopMinutes: 30, pauseAfterMinutes: 5 },
      result: { isolation: 'shared', maxInstances: 3, idleStopMinutes: 30, pauseAfterMinutes: 5 },
    },
    {
      name: 'agent vm pause',
      call: (c) => c.agentVMAction('a1', 'pause'),
      response: json(200, { agentId: 'a1', desktop: { state: 'paused' } }),
      method: 'POST',
      path: '/api/app/agents/a1/local-vm/pause',
      result: { agentId: 'a1', desktop: { state: 'paused' } },
    },
    {
      name: 'agent vm',
      call: (c) => c.agentVM('a/1'),
      response: json(200, { agentId: 'a/1' }),
      method: 'GET',
      path: '/api/app/agents/a%2F1/local-vm',
      result: { agentId: 'a/1' },
    },
    {
      name: 'agent vm action',
      call: (c) => c.agentVMAction('a1', 'recreate'),
      response: json(200, { agentId: 'a1' }),
      method: 'POST',
      path: '/api/app/agents/a1/local-vm/recreate',
      result: { agentId: 'a1' },
    },
    {
      name: 'agent vm image',
      call: (c) => c.setAgentImage('a1', 'cursor'),
      response: json(200, { agentId: 'a1' }),
      method: 'PUT',
      path: '/api/app/agents/a1/local-vm/image',
      body: { imageKey: 'cursor' },
      result: { agentId: 'a1' },
    },
    {
      name: 'chat sessions of an agent',
      call: (c) => c.chatSessions('a 1'),
      response: json(200, { sessions: null }),
      method: 'GET',
      path: '/api/app/chat/sessions?agentId=a%201',
      result: [],
    },
    {
      name: 'chat session',
      call: (c) => c.chatSession('s1'),
      response: json(200, { sessionId: 's1', history: [] }),
      method: 'GET',
      path: '/api/app/chat/sessions/s1',
      result: { sessionId: 's1', history: [] },
    },
    {
      name: 'chat timeline',
      call: (c) => c.chatTimeline('s1'),
      response: json(200, { sessionId: 's1', total: 0 }),
      method: 'GET',
      path: '/api/app/chat/sessions/s1/history',
      result: { sessionId: 's1', total: 0 },
    },
    {
      name: 'stop chat',
      call: (c) => c.stopChat('s1'),
      response: json(200, { stopped: true }),
      method: 'POST',
      path: '/api/app/chat/stop',
      body: { sessionId: 's1' },
      result: { stopped: true },
    },
    {
      name: 'change own password',
      call: (c) => c.changePassword('old-pass', 'New-pass-long-1'),
      response: json(200, { user: { id: 'u1', username: 'bob', role: 'member' } }),
      method: 'PUT',
      path: '/api/auth/password',
      body: { currentPassword: 'old-pass', newPassword: 'New-pass-long-1' },
      result: { id: 'u1', username: 'bob', role: 'member' },
    },
    {
      name: 'list users',
      call: (c) => c.listUsers(),
      response: json(200, { users: null }),
      method: 'GET',
      path: '/api/app/admin/users',
      result: [],
    },
    {
      name: 'create user',
      call: (c) => c.createUser('mia', 'Mia-long-pass-1', 'member'),
      response: json(201, { id: 'a2', username: 'mia' }),
      method: 'POST',
      path: '/api/app/admin/users',
      body: { username: 'mia', password: 'Mia-long-pass-1', role: 'member' },
      result: { id: 'a2', username: 'mia' },
    },
    {
      name: 'disable user',
      call: (c) => c.updateUser('a/2', { disabled: true }),
      response: json(200, { id: 'a/2' }),
      method: 'PUT',
      path: '/api/app/admin/users/a%2F2',
      body: { disabled: true },
      result: { id: 'a/2' },
    },
    {
      name: 'delete user with agents',
      call: (c) => c.deleteUser('a2', true),
      response: new Response(null, { status: 204 }),
      method: 'DELETE',
      path: '/api/app/admin/users/a2?deleteAgents=1',
      result: undefined,
    },
    {
      name: 'grant host tools',
      call: (c) => c.setHostAccess('a2', 'local', { hostTools: true }),
      response: json(200, { id: 'a2' }),
      method: 'PUT',
      path: '/api/app/admin/users/a2/host-access',
      body: { nodeId: 'local', hostTools: true },
      result: { id: 'a2' },
    },
    {
      name: 'security settings',
      call: (c) => c.setSecurity({ guardLevel: 'SMART', desktopHostPorts: [8080] }),
      response: json(200, { guardLevel: 'SMART' }),
      method: 'PUT',
      path: '/api/app/admin/security',
      body: { guardLevel: 'SMART', desktopHostPorts: [8080] },
      result: { guardLevel: 'SMART' },
    },
    {
      name: "a node's egress policy",
      call: (c) => c.setNodeEgress('local', { mode: 'allow-list', allow: ['pypi.org'] }),
      response: json(200, { nodeId: 'local' }),
      method: 'PUT',
      path: '/api/app/admin/egress/nodes/local',
      body: { mode: 'allow-list', allow: ['pypi.org'] },
      result: { nodeId: 'local' },
    },
    {
      name: "an agent back on the node's egress policy",
      call: (c) => c.setAgentEgress('ag/1', null),
      response: json(200, { nodeId: 'local' }),
      method: 'DELETE',
      path: '/api/app/admin/egress/agents/ag%2F1',
      result: { nodeId: 'local' },
    },
    {
      name: 'allow a refused destination',
      call: (c) => c.allowEgress('a1', '10.1.2.3'),
      response: json(200, { nodeId: 'local' }),
      method: 'POST',
      path: '/api/app/admin/egress/allow',
      body: { node: '', agentId: 'a1', destination: '10.1.2.3' },
      result: { nodeId: 'local' },
    },
    {
      name: "a runner's egress view",
      call: (c) => c.getEgress('r-1'),
      response: json(200, { nodeId: 'r-1' }),
      method: 'GET',
      path: '/api/app/admin/egress?node=r-1',
      result: { nodeId: 'r-1' },
    },
    {
      name: 'approve a sandbox refusal as a widening',
      call: (c) => c.approveWidening('f/1', 'directory'),
      response: json(200, { widening: { node: 'local', path: '/srv/out', access: 'read-write' }, refusals: [], widenings: [] }),
      method: 'POST',
      path: '/api/app/admin/sandbox/refusals/f%2F1/approve',
      body: { scope: 'directory' },
      result: { widening: { node: 'local', path: '/srv/out', access: 'read-write' }, refusals: [], widenings: [] },
    },
    {
      name: 'revoke a widening',
      call: (c) => c.revokeWidening({ node: 'local', path: '/srv/out', access: 'read-write' }),
      response: json(200, { widening: { node: 'local', path: '/srv/out', access: 'read-write' }, refusals: [], widenings: [] }),
      method: 'POST',
      path: '/api/app/admin/sandbox/revoke',
      body: { node: 'local', path: '/srv/out', access: 'read-write' },
      result: { widening: { node: 'local', path: '/srv/out', access: 'read-write' }, refusals: [], widenings: [] },
    },
    {
      name: 'delete a rule for every agent',
      call: (c) => c.deleteAllowRule({ id: 'r1', tool: 'x', createdAt: '' }),
      response: new Response(null, { status: 204 }),
      method: 'DELETE',
      path: '/api/app/admin/security/allow-rules/r1?agentId=',
      result: undefined,
    },
    {
      name: "an agent's own rules",
      call: (c) => c.agentAllowRules('ag/1'),
      response: json(200, { rules: null }),
      method: 'GET',
      path: '/api/app/agents/ag%2F1/allow-rules',
      result: [],
    },
    {
      name: "delete an agent's rule",
      call: (c) => c.deleteAgentAllowRule('ag1', 'r/2'),
      response: new Response(null, { status: 204 }),
      method: 'DELETE',
      path: '/api/app/agents/ag1/allow-rules/r%2F2',
      result: undefined,
    },
    {
      name: 'delete desktop data',
      call: (c) => c.deleteDesktopData('i1'),
      response: new Response(null, { status: 204 }),
      method: 'DELETE',
      path: '/api/app/admin/local-vm/instances/i1/data',
      result: undefined,
    },
  ];

  for (const tc of cases) {
    it(tc.name, async () => {
      const f = fakeFetch(tc.response, ...(tc.response instanceof TypeError ? [tc.response] : []));
      const client = new Client({ fetch: f.fetch });
      await expect(tc.call(client)).resolves.toEqual(tc.result);
      expect(f.calls).toHaveLength(1);
      const [call] = f.calls;
      expect(call.url).toBe(tc.path);
      expect(call.init.method).toBe(tc.method);
      expect(call.init.credentials).toBe('same-origin');
      const headers = headersOf(call);
      expect(headers['Authorization']).toBeUndefined();
      if (tc.method === 'GET') {
        expect(headers['Content-Type']).toBeUndefined();
        expect(call.init.body).toBeUndefined();
      } else {
        expect(headers['Content-Type']).toBe('application/json');
      }
      if (tc.body !== undefined) {
        expect(JSON.parse(call.init.body as string)).toEqual(tc.body);
      }
    });
  }
});

describe('Client desktop mode', () => {
  it('sends the bearer token to the backend URL and no cookies', async () => {
    const f = fakeFetch(json(200, { agents: [] }));
    const client = new Client({ baseUrl: 'http://127.0.0.1:40123/', token: 'tok', fetch: f.fetch });
    expect(client.usesToken).toBe(true);
    await client.listAgents();
    expect(f.calls[0].url).toBe('http://127.0.0.1:40123/api/app/agents');
    expect(f.calls[0].init.credentials).toBe('omit');
    expect(headersOf(f.calls[0])['Authorization']).toBe('Bearer tok');
  });

  it('an empty token means cookie mode', () => {
    expect(new Client({ token: '' }).usesToken).toBe(false);
  });
});

describe('Client errors', () => {
  const cases: Array<{ name: string; response: Response | Error; status: number; code: string; message: string }> = [
    {
      name: 'server error body',
      response: json(400, { error: 'computer must be one of vm, cloud', code: 'invalid' }),
      status: 400,
      code: 'invalid',
      message: 'computer must be one of vm, cloud',
    },
    {
      name: 'conflict class',
      response: json(409, { error: 'agent name already used', code: 'exists' }),
      status: 409,
      code: 'exists',
      message: 'agent name already used',
    },
    {
      name: 'unknown code falls back to status',
      response: json(404, { error: 'no such agent', code: 'weird' }),
      status: 404,
      code: 'not_found',
      message: 'no such agent',
    },
    {
      name: 'non-JSON body',
      response: new Response('<html>bad gateway</html>', { status: 502, statusText: 'Bad Gateway' }),
      status: 502,
      code: 'unknown',
      message: '502 Bad Gateway',
    },
    {
      name: 'network failure (twice: a GET is tried once more)',
      response: new TypeError('Failed to fetch'),
      status: 0,
      code: 'network',
      message: 'Cannot reach the Cubicle server (Failed to fetch).',
    },
    {
      name: 'forbidden',
      response: json(403, { error: 'admin only', code: 'forbidden' }),
      status: 403,
      code: 'forbidden',
      message: 'admin only',
    },
  ];
  for (const tc of cases) {
    it(tc.name, async () => {
      const f = fakeFetch(tc.response, ...(tc.response instanceof TypeError ? [tc.response] : []));
      const onUnauthenticated = vi.fn();
      const client = new Client({ fetch: f.fetch, onUnauthenticated });
      const err = await client.getAgent('x').catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ApiError);
      expect(err).toMatchObject({ status: tc.status, code: tc.code, message: tc.message });
      expect(onUnauthenticated).not.toHaveBeenCalled();
    });
  }

  it('a GET that failed on the network is sent once more; other methods never are', async () => {
    // Chromium fails requests in flight with net::ERR_NETWORK_CHANGED when the host's
    // interfaces change (a desktop's network coming up): the GET's second try answers.
    const get = fakeFetch(new TypeError('Failed to fetch'), json(200, agent));
    await expect(new Client({ fetch: get.fetch }).getAgent('a 1/x')).resolves.toMatchObject({ name: 'Researcher' });
    expect(get.calls.map((c) => c.init.method)).toEqual(['GET', 'GET']);

    // A request that names no method is a GET too (a recording's screenshot).
    const shot = fakeFetch(new TypeError('Failed to fetch'), new Response('png', { status: 200 }));
    await expect(new Client({ fetch: shot.fetch }).recordingScreenshot('a', 'r', 1)).resolves.toBeInstanceOf(Blob);
    expect(shot.calls).toHaveLength(2);

    const post = fakeFetch(new TypeError('Failed to fetch'), json(200, agent));
    const err = await new Client({ fetch: post.fetch }).createAgent('Researcher').catch((e: unknown) => e);
    expect(err).toMatchObject({ status: 0, code: 'network' });
    expect(post.calls).toHaveLength(1);

    const aborted = new AbortController();
    aborted.abort();
    const gone = fakeFetch(new TypeError('Failed to fetch'), json(200, agent));
    await expect(new Client({ fetch: gone.fetch }).desktopFilesChanged('a', 'workspace', 5, aborted.signal)).rejects.toMatchObject({ code: 'network' });
    expect(gone.calls).toHaveLength(1);
  });

  it('a successful response that is not JSON is an error', async () => {
    const f = fakeFetch(new Response('hello', { status: 200 }));
    await expect(new Client({ fetch: f.fetch }).getAgent('x')).rejects.toMatchObject({ code: 'unknown' });
  });
});

describe('Client 401 handling', () => {
  const unauth = () => json(401, { error: 'log in first', code: 'unauthenticated' });

  it('401 on an app call reports unauthenticated', async () => {
    const f = fakeFetch(unauth());
    const onUnauthenticated = vi.fn();
    const client = new Client({ fetch: f.fetch, onUnauthenticated });
    await expect(client.listAgents()).rejects.toMatchObject({ status: 401, code: 'unauthenticated' });
    expect(onUnauthenticated).toHaveBeenCalledTimes(1);
  });

  it('401 from me reports unauthenticated', async () => {
    const f = fakeFetch(unauth());
    const onUnauthenticated = vi.fn();
    await expect(new Client({ fetch: f.fetch, onUnauthenticated }).me()).rejects.toBeInstanceOf(ApiError);
    expect(onUnauthenticated).toHaveBeenCalledTimes(1);
  });

  it('401 from login is wrong credentials, not a redirect', async () => {
    const f = fakeFetch(json(401, { error: 'wrong username or password', code: 'unauthenticated' }));
    const onUnauthenticated = vi.fn();
    const client = new Client({ fetch: f.fetch, onUnauthenticated });
    await expect(client.login('admin', 'nope')).rejects.toMatchObject({ status: 401 });
    expect(onUnauthenticated).not.toHaveBeenCalled();
  });

  it('401 from logout does not loop back', async () => {
    const f = fakeFetch(unauth());
    const onUnauthenticated = vi.fn();
    await expect(new Client({ fetch: f.fetch, onUnauthenticated }).logout()).rejects.toMatchObject({ status: 401 });
    expect(onUnauthenticated).not.toHaveBeenCalled();
  });
});

describe('Client chat stream', () => {
  const streamOf = (chunks: string[]) =>
    new Response(
      new ReadableStream({
        start(c) {
          const enc = new TextEncoder();
          for (const ch of chunks) c.enqueue(enc.encode(ch));
          c.close();
        },
      }),
      { status: 200, headers: { 'Content-Type': 'text/event-stream' } },
    );

  it('posts the turn and delivers every event, across chunk boundaries', async () => {
    const f = fakeFetch(streamOf(['data: {"type":"AGENT_START"}\n\ndata: {"type":"TEXT_BLOCK', '_DELTA","delta":"你好"}\n\n', 'data: {"type":"AGENT_END"}\n\n']));
    const client = new Client({ fetch: f.fetch });
    const got: string[] = [];
    await client.chat({ sessionId: 's1', userId: 'u1', agentId: 'a1', input: 'hi' }, (e) => got.push(e.type + (e.type === 'TEXT_BLOCK_DELTA' ? (e.delta ?? '') : '')));
    expect(got).toEqual(['AGENT_START', 'TEXT_BLOCK_DELTA你好', 'AGENT_END']);
    const [call] = f.calls;
    expect(call.url).toBe('/api/app/chat');
    expect(call.init.method).toBe('POST');
    expect(headersOf(call)['Accept']).toBe('text/event-stream');
    expect(JSON.parse(call.init.body as string)).toEqual({ sessionId: 's1', userId: 'u1', agentId: 'a1', input: 'hi' });
  });

  it('group chats: list, create, read, and a message streamed with its agentId', async () => {
    const chat = { id: 'g-1', title: 'Pair', members: [], createdAt: '', updatedAt: '' };
    const f = fakeFetch(
      json(200, { chats: null }),
      json(201, chat),
      json(200, { chat, entries: [] }),
      streamOf(['data: {"type":"AGENT_START","agentId":"b1"}\n\n', 'data: {"type":"AGENT_END","agentId":"b1"}\n\n']),
    );
    const client = new Client({ fetch: f.fetch });
    expect(await client.groupChats()).toEqual([]);
    expect(await client.createGroupChat('Pair', ['a1', 'b1'])).toEqual(chat);
    expect((await client.groupChat('g 1')).chat.id).toBe('g-1');
    const acted: string[] = [];
    await client.groupChatSend({ chatId: 'g-1', message: '@Bo hi' }, (e) => acted.push(`${e.type} ${e.agentId}`));
    expect(acted).toEqual(['AGENT_START b1', 'AGENT_END b1']);
    expect(f.calls.map((c) => `${c.init.method} ${c.url}`)).toEqual([
      'GET /api/app/chats',
      'POST /api/app/chats',
      'GET /api/app/chats/g%201',
      'POST /api/app/chat',
    ]);
    expect(JSON.parse(f.calls[1].init.body as string)).toEqual({ title: 'Pair', agentIds: ['a1', 'b1'] });
    expect(JSON.parse(f.calls[3].init.body as string)).toEqual({ chatId: 'g-1', message: '@Bo hi' });
  });

  it('a refusal before the stream is an ApiError with the server message', async () => {
    const f = fakeFetch(json(503, { error: 'chat is not available in this mode', code: 'unavailable' }));
    const client = new Client({ fetch: f.fetch });
    await expect(client.chat({ sessionId: 's', userId: 'u', agentId: 'a', input: 'x' }, () => undefined)).rejects.toMatchObject({
      status: 503,
      code: 'unavailable',
      message: 'chat is not available in this mode',
    });
  });
});

describe('desktop file uploads', () => {
  it('sends a chunk as raw bytes at its offset and reads a 409 as where to resume', async () => {
    const f = fakeFetch(json(200, { path: 'a b.bin', offset: 3 }), json(409, { offset: 2, error: 'the desktop has 2 bytes', code: 'conflict' }), json(400, { error: 'leaves the workspace', code: 'invalid' }));
    const t = new Client({ fetch: f.fetch, token: 'tok' }).uploads('ag/1');
    await expect(t.put('a b.bin', 0, 6, new Blob(['abc']))).resolves.toEqual({ path: 'a b.bin', offset: 3 });
    expect(f.calls[0].url).toBe('/api/app/agents/ag%2F1/files/upload?path=a+b.bin&offset=0&total=6');
    expect(f.calls[0].init.method).toBe('PUT');
    expect(headersOf(f.calls[0])['Content-Type']).toBe('application/octet-stream');
    expect(headersOf(f.calls[0])['Authorization']).toBe('Bearer tok');
    const mismatch = await t.put('a b.bin', 3, 6, new Blob(['def'])).catch((e: unknown) => e);
    expect(mismatch).toBeInstanceOf(OffsetMismatch);
    expect((mismatch as OffsetMismatch).offset).toBe(2);
    const refused = await t.put('../x', 0, 1, new Blob(['x'])).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ApiError);
    expect((refused as ApiError).status).toBe(400);
  });
});
