// The one client for Cubicle's HTTP API. It mirrors the Go routes one method per route and
// holds no business rules: the server validates and decides, and its answer is the truth.
//
// Two shells share it: in the browser (`cubicle serve`) requests are same-origin and carry
// the HttpOnly session cookie; in the Wails window they go to the backend's loopback URL
// with a per-launch bearer token and no cookies.

import type * as gen from './gen/nodeapi';
import type * as group from './gen/groupchat';
import { SSEParser, type ChatEvent, type ConfirmResult, type Msg } from './chat';
import { OffsetMismatch, type UploadState, type UploadTransport } from './upload';

/** A workspace snapshot (GET /api/app/agents/:id/snapshots). */
export interface WorkspaceSnapshot {
  id: string;
  agentId: string;
  name: string;
  /** "manual", "turn", "fork" or "before-restore". */
  kind: string;
  sessionId?: string;
  turnId?: string;
  /** The chat reply of the turn that ended with this snapshot. */
  replyId?: string;
  /** The snapshot of the workspace as that turn found it: restoring it undoes the turn. */
  before?: string;
  createdAt: string;
  treeSha256: string;
  files: number;
  bytes: number;
}

/** What restoring a snapshot would change in the workspace. */
export interface SnapshotDiff {
  added: string[];
  removed: string[];
  changed: string[];
  addedCount: number;
  removedCount: number;
  changedCount: number;
  truncated: boolean;
}

/** A signed-in account. */
export interface User {
  id: string;
  username: string;
  /** "admin" or "member". */
  role: string;
}

/** What an account may do on an execution node's host (granted by an administrator). */
export interface HostAccess {
  hostTools: boolean;
  hostDesktop: boolean;
  /** Held by the administrator role rather than a grant. */
  byRole?: boolean;
}

/** An account on the Users page (GET /api/app/admin/users). */
export interface Account {
  id: string;
  username: string;
  role: 'admin' | 'member' | string;
  disabled: boolean;
  createdAt: string;
  passwordSetAt?: string;
  passwordChosen: boolean;
  agents: number;
  /** By execution node id ("local" is this server's own). */
  hostAccess: Record<string, HostAccess>;
}

/** The body of PUT /api/app/admin/users/:id; omitted fields stay. */
export interface AccountChange {
  role?: 'admin' | 'member';
  disabled?: boolean;
  password?: string;
}

/** An approved model base URL (Settings → Security). */
export interface ModelEndpoint {
  baseUrl: string;
  allowPrivate?: boolean;
}

/** GET/PUT /api/app/admin/security. */
export interface SecuritySettings {
  guardLevel: string;
  effectiveLevel: string;
  levels: string[];
  deniedTools: string[];
  protectedPaths: string[];
  vmProtectedPaths: string[];
  builtinProtected: string[];
  builtinVmProtected: string[];
  accessPolicy: Record<string, string>;
  knownTools: string[] | null;
  modelEndpoints: ModelEndpoint[];
  desktopHostPorts: number[];
  updatedAt?: string;
  updatedBy?: string;
}

/** The body of PUT /api/app/admin/security; omitted fields stay. */
export interface SecurityUpdate {
  guardLevel?: string;
  deniedTools?: string[];
  protectedPaths?: string[];
  vmProtectedPaths?: string[];
  accessPolicy?: Record<string, string>;
  modelEndpoints?: ModelEndpoint[];
  desktopHostPorts?: number[];
}

/** A desktop egress policy (docs/egress.md): allow entries are host names, *.names, addresses or CIDRs. Mode: open | allow-list | closed. */
export type EgressPolicy = gen.EgressPolicy;

/** A destination a desktop's egress policy refused (since the server started). */
export interface EgressBlockedSummary {
  agentId?: string;
  instanceId: string;
  destination: string;
  port?: number;
  proto: string;
  count: number;
  last: string;
}

/** GET /api/app/admin/egress: the node's policy, agents' own ones and what was refused. */
export interface EgressView {
  nodeId: string;
  node: EgressPolicy;
  agents: { agentId: string; agentName?: string; policy: EgressPolicy }[];
  blocked: EgressBlockedSummary[];
  enforcement?: string;
  problem?: string;
}

/** A host sandbox refusal as recorded (docs/sandbox.md "Widening"). */
export interface SandboxRefusal {
  id: string;
  node: string;
  nodeName: string;
  home?: string;
  accountId: string;
  accountName?: string;
  agentId?: string;
  agentName?: string;
  path: string;
  /** A write outside the writable paths; otherwise a hidden path was read. */
  write?: boolean;
  hidden?: string;
  line?: string;
  first: string;
  at: string;
  count: number;
  /** A widening now allows it. */
  widened: boolean;
}

/** A path of a node's host sandbox an administrator opened. Access: read | read-write. */
export interface SandboxWidening {
  node: string;
  path: string;
  access: string;
}

/** GET /api/app/admin/sandbox: what the host sandbox refused and the widenings in force. */
export interface SandboxReview {
  refusals: SandboxRefusal[];
  widenings: SandboxWidening[];
}

/** An effect of an MCP server's access policy. */
export type McpEffect = 'allow' | 'ask' | 'deny';

/** A rule of an MCP access policy: tool "" (or absent) is the whole server; subject user:NAME, agent:ID or *. */
export interface McpRule {
  tool?: string;
  subject: string;
  effect: McpEffect | string;
}

/** An MCP server's access policy: its default effect (deny for a new server) and rules. */
export interface McpPolicy {
  default: McpEffect | string;
  rules: McpRule[];
}

/** An MCP server as an administrator sees it (GET /api/app/admin/mcp-servers): secrets masked. */
export interface McpServer {
  id: string;
  name: string;
  transport: 'http' | 'sse' | 'stdio' | string;
  description: string;
  url?: string;
  /** Header name → masked value. */
  headers: Record<string, string>;
  allowPrivate: boolean;
  command?: string;
  /** stdio: the command runs on the Cubicle server, in its OS sandbox, instead of the agent's desktop. */
  onServer: boolean;
  args: string[];
  /** Environment name → masked value. */
  env: Record<string, string>;
  timeoutSeconds: number;
  disabled: boolean;
  policy: McpPolicy;
  agents: string[];
  createdAt: string;
  updatedAt: string;
  updatedBy?: string;
}

/** A server as the admin gives it; absent fields keep what was saved, a null secret keeps its saved value. */
export interface McpServerInput {
  name?: string;
  transport?: string;
  description?: string;
  url?: string;
  headers?: Record<string, string | null>;
  allowPrivate?: boolean;
  command?: string;
  onServer?: boolean;
  args?: string[];
  env?: Record<string, string | null>;
  timeoutSeconds?: number;
  disabled?: boolean;
  policy?: McpPolicy;
}

/** A server as an agent's owner sees it (GET /api/app/agents/:id/mcp-servers). */
export interface AgentMcpServer {
  id: string;
  name: string;
  description: string;
  transport: string;
  disabled: boolean;
  enabled: boolean;
}

/** A saved "always allow" rule. agentId "" applies to every agent. */
export interface AllowRule {
  id: string;
  agentId?: string;
  agentName?: string;
  tool: string;
  command?: string;
  pattern?: string;
  createdBy?: string;
  createdByName?: string;
  createdAt: string;
}

/** One answer a person gave to a confirmation request. */
export interface Confirmation {
  id: string;
  at: string;
  accountId: string;
  username: string;
  agentId?: string;
  sessionId: string;
  tool: string;
  summary: string;
  reason?: string;
  confirmed: boolean;
  rules?: string[];
}

/** The computer an agent works on (SPEC §1.6, §1.11). */
export type ComputerType = 'vm' | 'cloud' | 'host' | 'browser' | 'auto' | 'none';

/** An agent as the server returns it. */
export interface Agent {
  id: string;
  name: string;
  computer: ComputerType;
  allowHostEnvironment: boolean;
  /** The working directory (terminal.cwd); "" or "." is the default. */
  workdir?: string;
  /** Bind the desktop at the first tool call (true) or before the first model call (false). */
  lazyInit?: boolean;
  /** The execution node of its desktop: "local" or a runner's id. */
  nodeId?: string;
  createdAt: string;
  updatedAt: string;
}

/** What an agent's turn gets (GET /api/app/agents/:id/computer-plan; backend/computer Plan.Notice). */
export interface PlanNotice {
  selected: string;
  computer: string;
  label: string;
  tools: string[];
  reason?: string;
  unavailable?: boolean;
  hostProblem?: string;
  hostDesktopProblem?: string;
  /** The node whose host runs the host tools (set when they are offered). */
  hostNode?: string;
  /** The cloud node whose desktop a cloud computer works on. */
  cloudNode?: string;
}

/** The answer of POST /api/app/agents/:id/opened (backend/api Anticipation). */
export interface Anticipation {
  started: boolean;
  state?: string;
  why?: string;
}

/** GET /api/app/agents/:id/computer-plan. */
export interface ComputerPlan {
  agentId: string;
  next: PlanNotice;
  last?: PlanNotice;
}

/** GET/PUT /api/app/admin/host: the execution node's own screen. */
export interface HostView {
  nodeId: string;
  screenControl: boolean;
  os: { granted: boolean; missing?: string; howToGrant?: string };
  displays: Array<{ index: number; width: number; height: number; primary?: boolean }>;
  available: boolean;
  problem?: string;
}

/** A desktop volume (work files or browser profile); sizeBytes is -1 when the engine could not measure it. */
export type VolumeView = gen.VolumeView;

/** GET /api/app/agents/:id/deletion: what deleting the agent concerns (sizeBytes -1: a size is unknown). */
export interface AgentDeletion extends gen.AgentData {
  /** Why the agent cannot be deleted now. */
  busy?: string;
}

/** The body of DELETE /api/app/agents/:id. */
export interface DeleteAgentOptions {
  removeDesktop: boolean;
  deleteData: boolean;
}

/** GET /api/app/admin/housekeeping. */
export interface Leftovers {
  containers: Array<{ name: string; id: string; instance?: string; role?: string; state: string; running: boolean; image?: string; dataDir: string; why: string }>;
  volumes: Array<{ name: string; instance?: string; kind?: string; sizeBytes: number; createdAt?: string; why: string }>;
  images: Array<{ ref: string; id: string; sizeBytes: number; createdAt?: string; why: string }>;
  notes?: string[];
}

/** What to remove (POST /api/app/admin/housekeeping/clean). */
export interface LeftoverSelection {
  containers: string[];
  volumes: string[];
  images: string[];
}

/** One removal's outcome. */
export interface CleanOutcome {
  kind: 'container' | 'volume' | 'image';
  name: string;
  removed: boolean;
  error?: string;
}

/** One message of the event stream (GET /api/app/events; docs/events.md). */
export interface StreamMessage {
  type: string;
  /** "<epoch>-<n>" on bus events; absent on stream.hello / stream.resync. */
  id?: string;
  time?: string;
  /** The payload; events.ts types it by the event's type (BusEvent). */
  data?: unknown;
  epoch?: string;
  admin?: boolean;
}

/** The body of PUT /api/app/agents/:id/computer-selection. */
export interface ComputerSelection {
  computer: ComputerType;
  allowHostEnvironment: boolean;
}

/** One line of the engine/host report from GET /api/app/admin/doctor. */
export interface DoctorCheck {
  name: string;
  status: 'ok' | 'warn' | 'fail';
  detail: string;
  fix: string;
}

/** GET /api/health. */
export interface Health {
  ok: boolean;
  version: string;
}

/** GET/PUT /api/app/admin/model. */
export interface ModelSettings {
  baseUrl: string;
  model: string;
  hasApiKey: boolean;
  configured: boolean;
  source: string;
  /** The base URL may be a loopback or private address (the administrator's allowance). */
  allowPrivate?: boolean;
  /** The base URL's wire protocol. */
  provider?: Provider;
  /** The last Test of these settings (absent: not tested since they were saved). */
  tested?: { at: string; ok: boolean; code?: string; problem?: string };
}

/** GET /api/app/knowledge: the caller's account's past runs and how they are retrieved. */
export interface KnowledgeStats {
  runs: number;
  /** "hybrid": BM25 re-ranked by embeddings; "keyword": BM25 only (no embeddings endpoint). */
  mode: 'hybrid' | 'keyword';
}

/** One past run a search found. */
export interface KnowledgeHit {
  id: string;
  agentId?: string;
  agentName?: string;
  sessionId: string;
  request: string;
  /** The tools in order, a tool repeated in a row once. */
  tools: string[];
  toolCalls: number;
  status: 'success' | 'failed' | 'stopped';
  error?: string;
  result?: string;
  startedAt: string;
  endedAt: string;
  /** The run's agent chat in the UI (a hash route). */
  link: string;
  score: number;
}

/** GET /api/app/knowledge/search?q=: the caller's account's best matching past runs. */
export interface KnowledgeResult {
  query: string;
  mode: 'hybrid' | 'keyword';
  /** Why vectors were not used although configured (the endpoint failed). */
  notice?: string;
  hits: KnowledgeHit[];
}

/** GET/PUT /api/app/admin/knowledge/embeddings: the embeddings endpoint (never its key). */
export interface EmbeddingsSettings {
  baseUrl: string;
  model: string;
  hasApiKey: boolean;
  allowPrivate: boolean;
  configured: boolean;
}

/** The body of PUT /api/app/admin/knowledge/embeddings; apiKey omitted keeps, "" clears; an empty baseUrl turns vectors off. */
export interface EmbeddingsUpdate {
  baseUrl: string;
  model: string;
  apiKey?: string;
  allowPrivate?: boolean;
}

/** The wire protocols a model base URL may speak. */
export type Provider = 'openai-compatible' | 'anthropic' | 'openai-responses';

/** GET /api/app/admin/model/models and /api/app/agents/:id/model/models: the saved endpoint's models. */
export interface ModelList {
  provider: string;
  baseUrl: string;
  models: string[];
  /** Why there is no list: "key", "url", "unsupported", "config" or "unavailable". */
  code?: string;
  problem?: string;
}

/** POST /api/app/admin/model/test and /api/app/agents/:id/model/test. */
export interface ModelTestResult {
  ok: boolean;
  provider: string;
  baseUrl: string;
  model: string;
  /** What failed: "key", "model", "url", "quota", "unavailable" or "config". */
  code?: string;
  problem?: string;
  seconds: number;
}

/**
 * The body of PUT /api/app/admin/model; apiKey omitted keeps the saved key while the base URL
 * stays (a new base URL drops it), "" clears it.
 */
export interface ModelUpdate {
  baseUrl: string;
  model: string;
  apiKey?: string;
  allowPrivate?: boolean;
  /** The base URL's wire protocol; omitted = openai-compatible. */
  provider?: Provider;
}

/** GET/PUT /api/app/agents/:id/model: an agent's own model (never its key). */
export interface AgentModel {
  /** The agent's own base URL; "" inherits the app's (and its key). */
  baseUrl: string;
  /** The agent's own model name; "" inherits the app's. */
  model: string;
  hasApiKey: boolean;
  /** The agent's own base URL is approved (set by an administrator, or on the approved list). */
  approved?: boolean;
  /** The wire protocol of the agent's own base URL ("" without one). */
  provider?: string;
  allowPrivate?: boolean;
  /** The app's model settings the empty fields inherit from. */
  inherits: ModelSettings;
  /** What a turn of this agent uses. */
  effective: {
    baseUrl: string;
    model: string;
    source: 'agent' | 'settings' | 'environment' | 'none' | string;
    configured: boolean;
    /** Why no model can run and where to fix it. */
    problem?: string;
  };
}

/** Progress of one image preparation. */
export type PrepareState = gen.PrepareState;

/** The state of one first-run step (backend/setup). */
export type SetupState = 'done' | 'needed' | 'working' | 'failed';

/** One first-run step. */
export interface SetupStep {
  state: SetupState;
  /** What was found, or what to do ("" in a member's view of an administrator's step but "an administrator completes this step"). */
  detail: string;
  /** The image preparation's progress while it runs (-1 unknown). */
  percent?: number;
  /** Only an administrator can complete it. */
  admin: boolean;
}

/** GET /api/app/admin/setup (details) and GET /api/app/setup (states only, the caller's own agents). */
export interface SetupStatus {
  engine: SetupStep;
  image: SetupStep;
  model: SetupStep;
  agents: SetupStep;
  done: boolean;
}

/** One image key and its prepared record. */
export type ImageView = gen.ImageView;

/** A desktop. */
export type InstanceView = gen.InstanceView;

/** How new desktops' drivers are reached (CUBICLE_GUEST_LINK), and why. */
export type GuestLinkChoice = gen.GuestLink;

/** The node's policies. */
export type VMPolicy = gen.Policy;

/** A base image pinned by digest (images.Pin). */
export type ImagePin = gen.Pin;

/** Where an image source value comes from (backend/vm From*). */
export type SourceOrigin = 'settings' | 'environment' | 'default';

/** One base image's source; the origins narrowed to their values. */
export interface ImageSourceView extends gen.SourceView {
  imageFrom: SourceOrigin;
  digestFrom: SourceOrigin;
}

/** The images' bases. */
export interface ImageSources extends gen.ImageSources {
  standard: ImageSourceView;
  cursor: ImageSourceView;
}

/** PUT /api/app/admin/local-vm/image-sources: a part left out is unchanged, "" inherits. */
export type ImageSourcesUpdate = gen.ImageSourcesUpdate;

/** GET /api/app/admin/local-vm (Go encodes an empty list as null). */
export interface LocalVMStatus extends Omit<gen.Status, 'images' | 'instances' | 'imageSources'> {
  images: ImageView[] | null;
  instances: InstanceView[] | null;
  imageSources: ImageSources;
}

/** A node's engine choice: kind "" (find one), podman, docker, kubernetes or none. */
export type EngineSettings = gen.EngineSettings;

/** GET /api/app/admin/local-vm/engine: the engine in force, the saved choice, what overrides it. */
export interface EngineStatus {
  active: string;
  endpoint?: string;
  problem?: string;
  settings: EngineSettings;
  saved: EngineSettings;
  overrides?: string[];
  /** The saved choice differs from what runs: it applies when Cubicle next starts. */
  restartNeeded: boolean;
  imagesProblem?: string;
}

/** GET /api/app/agents/:id/local-vm (Go encodes an empty list as null). */
export interface AgentVM extends Omit<gen.AgentView, 'images'> {
  images: string[] | null;
}

/** An instance action. */
export type VMAction = 'create' | 'start' | 'stop' | 'recreate' | 'remove' | 'pause' | 'resume';

/** A chat session in the list. */
export interface ChatSessionInfo {
  sessionId: string;
  agentId?: string;
  title?: string;
  createdAt: string;
  updatedAt: string;
}

/** A saved chat session with its history. */
export interface ChatSessionFull extends ChatSessionInfo {
  history?: Msg[] | null;
  pending?: unknown;
}

/** One tool run of the execution history. */
export interface ToolRun {
  id: string;
  turnId: string;
  step: number;
  tool: string;
  /** "main/<name>" for a task helper's call. */
  source?: string;
  status: string;
  durationMs: number;
  createdAt: string;
  /** When it started running (absent while PENDING and for a call that never ran). */
  startedAt?: string;
  inputSha256?: string;
  outputSha256: string | null;
  /** Peak memory and CPU time of the command the call ran, where it ran. */
  memoryBytes?: number;
  cpuMillis?: number;
  /** A person declined it (or the guard denied it after the wait). */
  denied?: boolean;
}

/** GET /api/app/chat/sessions/:id/history. */
export interface Timeline {
  sessionId: string;
  runs: ToolRun[] | null;
  total: number;
  failed: number;
  failureRate: number;
  durationMs: number;
  byTool: Array<{ tool: string; count: number; failed: number; durationMs: number; maxMs: number }> | null;
}

/** A moment of a recording worth jumping to (docs/recording.md). */
export interface RecordingMarker {
  /** ms since the recording started; for a tool call when its result came back. */
  at: number;
  kind: 'tool' | 'turn' | 'control' | 'desktop' | string;
  label: string;
  runId?: string;
  agentId?: string;
  tool?: string;
  beganAt?: number;
  /** The screenshot the agent received is kept (recordingScreenshot). */
  screenshot?: boolean;
}

/** GET /api/app/agents/:id/recordings: a recording of the agent's desktop. */
export interface Recording {
  id: string;
  desktopId: string;
  node: string;
  agentIds: string[];
  startedAt: string;
  endedAt?: string;
  live: boolean;
  durationMs: number;
  bytes: number;
  keyframes: number;
  width?: number;
  height?: number;
  markers: RecordingMarker[];
  notes?: string[];
}

/** GET/PUT /api/app/admin/recordings (admin only). */
export interface RecordingSettings {
  neverRecord: string[];
  keepDays: number;
  maxBytes: number;
  count: number;
  bytes: number;
}

/** The body of POST /api/app/chat. */
export interface ChatRequest {
  sessionId: string;
  userId: string;
  agentId: string;
  input: string;
  confirmResults?: ConfirmResult[];
  /** The external tools this client runs (chat.ts clientTools). */
  clientTools?: string[];
}

/** A group chat (backend/groupchat view.go). */
export type GroupChat = group.Chat;
/** A member agent of a group chat. */
export type GroupMember = group.Member;
/** One message of a group chat's transcript. */
export type GroupEntry = group.Entry;
/** A group chat with its transcript (GET /api/app/chats/:id). */
export type GroupTranscript = group.Transcript;

/** A message to a group chat (POST /api/app/chat {chatId, message, to?}). */
export interface GroupChatRequest {
  chatId: string;
  message: string;
  /** The member it goes to (agent id or name); without it an @name at the start, else whose turn it is. */
  to?: string;
  confirmResults?: ConfirmResult[];
  clientTools?: string[];
}

/** The body of POST /api/app/chat/external: a client tool's result. */
export interface ExternalResult {
  sessionId: string;
  toolCallId: string;
  state: 'success' | 'error' | 'denied';
  content?: Array<{ type: 'file' | 'text'; name?: string; mediaType?: string; data?: string; text?: string }>;
  error?: string;
}

/** The error classes the server puts in `code`. */
export type ErrorCode =
  | 'not_found'
  | 'invalid'
  | 'conflict'
  | 'forbidden'
  | 'unauthenticated'
  | 'exists'
  | 'unavailable'
  | 'rate_limited'
  | 'network'
  | 'unknown';

/** A failed API call: the HTTP status, the server's error class and its message. */
export class ApiError extends Error {
  readonly status: number;
  readonly code: ErrorCode;

  constructor(status: number, code: ErrorCode, message: string) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
  }
}

/** A folder the downloads panel shows. */
export type DesktopFolder = 'downloads' | 'workspace';

/** One entry of a desktop folder. */
export interface DesktopFile {
  name: string;
  size: number;
  /** RFC 3339. */
  modified: string;
  dir?: boolean;
}

/** GET /api/app/agents/:id/files: newest first, at most 2000 entries. */
export interface DesktopFileList {
  dir: DesktopFolder;
  files: DesktopFile[];
  truncated?: boolean;
}

/** How the client reaches the backend. */
export interface ClientOptions {
  /** Prefix for every path; empty means same origin (the web shell). */
  baseUrl?: string;
  /** Bearer token (desktop shell). When set, no cookies are sent. */
  token?: string;
  /** fetch implementation; defaults to the global one (tests inject a mock). */
  fetch?: typeof fetch;
  /**
   * Called when the server answers 401 to any call except login, so the app can go back
   * to the login page.
   */
  onUnauthenticated?: () => void;
}

type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

const knownCodes: readonly ErrorCode[] = [
  'not_found',
  'invalid',
  'conflict',
  'forbidden',
  'unauthenticated',
  'exists',
  'unavailable',
  'rate_limited',
];

/** Falls back to a class derived from the status when the body has no known code. */
function codeFor(status: number, code: unknown): ErrorCode {
  if (typeof code === 'string' && (knownCodes as readonly string[]).includes(code)) {
    return code as ErrorCode;
  }
  switch (status) {
    case 400:
      return 'invalid';
    case 401:
      return 'unauthenticated';
    case 403:
      return 'forbidden';
    case 404:
      return 'not_found';
    case 409:
      return 'conflict';
    case 503:
      return 'unavailable';
    default:
      return 'unknown';
  }
}

/** The ?node= of the Local VM admin routes: none for this computer ("local"), else the runner's id. */
export function nodeQuery(node?: string): string {
  return node && node !== 'local' ? `?node=${encodeURIComponent(node)}` : '';
}

/** A runner (execution node) as GET /api/app/admin/runners lists it. */
export interface Runner {
  id: string;
  name: string;
  status: 'connected' | 'disconnected' | 'revoked';
  version: string;
  os: string;
  arch: string;
  engine: string;
  engineError?: string;
  capabilities: string[];
  desktops: { running: number; max: number };
  lastSeen?: string;
  cloud: boolean;
  /** Its update channel. */
  channel: RunnerChannelName;
  /** The version its channel's rollout wants it to run ("" = none: it keeps its own). */
  targetVersion: string;
  /** The server offers targetVersion for its os/arch and it runs another version. */
  updateAvailable: boolean;
  /** Why a wanted update cannot be offered. */
  updateProblem?: string;
}

/** A runner just added: the only time its token is shown. */
export interface CreatedRunner {
  id: string;
  name: string;
  cloud: boolean;
  token: string;
  /** One shell line (Linux, macOS): download the binary for the machine, then run it. */
  joinCommand: string;
  /** The join command per system: "linux/macos", "windows". */
  joinCommands?: Record<string, string>;
  /** The runner's command line alone (the machine already has cubicle). */
  runCommand?: string;
}

export type RunnerChannelName = 'release' | 'canary';

/** One update channel: the version its runners should run and the share of them that gets it. */
export interface RunnerChannel {
  version: string;
  rolloutPercent: number;
}

/** GET/PUT /api/app/admin/runner-channels. */
export interface RunnerChannels {
  release: RunnerChannel;
  canary: RunnerChannel;
  /** Answers only: the server's own version and the versions it offers binaries of. */
  serverVersion?: string;
  versions?: string[];
}

/** How long a GET that failed on the network waits before its one more try (Client.send). */
const RETRY_GET_AFTER_MS = 150;

const agentPath = (id: string) => `/api/app/agents/${encodeURIComponent(id)}`;

/** Client for Cubicle's API; one method per route. */
export class Client {
  private readonly baseUrl: string;
  private readonly token?: string;
  private readonly fetchImpl: typeof fetch;
  private readonly onUnauthenticated?: () => void;

  constructor(opts: ClientOptions = {}) {
    this.baseUrl = (opts.baseUrl ?? '').replace(/\/+$/, '');
    this.token = opts.token;
    this.fetchImpl = opts.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.onUnauthenticated = opts.onUnauthenticated;
  }

  /** True when the client authenticates with a bearer token (desktop shell). */
  get usesToken(): boolean {
    return this.token !== undefined && this.token !== '';
  }

  /** GET /api/health (no authentication). */
  health(): Promise<Health> {
    return this.request<Health>('GET', '/api/health');
  }

  /** POST /api/auth/login; sets the session cookie. A 401 means wrong credentials. */
  async login(username: string, password: string): Promise<User> {
    const res = await this.request<{ user: User }>(
      'POST',
      '/api/auth/login',
      { username, password },
      { redirectOn401: false },
    );
    return res.user;
  }

  /** POST /api/auth/logout; clears the session cookie. */
  async logout(): Promise<void> {
    await this.request<void>('POST', '/api/auth/logout', undefined, { redirectOn401: false });
  }

  /** GET /api/auth/me: the signed-in user, or ApiError 401. */
  async me(): Promise<User> {
    const res = await this.request<{ user: User }>('GET', '/api/auth/me');
    return res.user;
  }

  /** GET /api/app/agents. */
  async listAgents(): Promise<Agent[]> {
    const res = await this.request<{ agents: Agent[] | null }>('GET', '/api/app/agents');
    return res.agents ?? [];
  }

  /** POST /api/app/agents. */
  createAgent(name: string): Promise<Agent> {
    return this.request<Agent>('POST', '/api/app/agents', { name });
  }

  /** POST /api/app/agents {name, from}: a new agent whose workspace starts as a snapshot (a fork). */
  forkAgent(name: string, from: { agentId: string; snapshotId: string }): Promise<Agent> {
    return this.request<Agent>('POST', '/api/app/agents', { name, from });
  }

  /** GET /api/app/agents/:id/snapshots: the agent's workspace snapshots, newest first. */
  async listSnapshots(agentId: string): Promise<WorkspaceSnapshot[]> {
    const res = await this.request<{ snapshots: WorkspaceSnapshot[] | null }>('GET', `${agentPath(agentId)}/snapshots`);
    return res.snapshots ?? [];
  }

  /** POST /api/app/agents/:id/snapshots {name}. */
  takeSnapshot(agentId: string, name = ''): Promise<WorkspaceSnapshot> {
    return this.request<WorkspaceSnapshot>('POST', `${agentPath(agentId)}/snapshots`, { name });
  }

  /** GET /api/app/agents/:id/snapshots/:sid/diff: what restoring the snapshot would change. */
  snapshotDiff(agentId: string, snapshotId: string): Promise<SnapshotDiff> {
    return this.request<SnapshotDiff>('GET', `${agentPath(agentId)}/snapshots/${encodeURIComponent(snapshotId)}/diff`);
  }

  /** POST /api/app/agents/:id/snapshots/:sid/restore (the desktop is stopped around it). */
  restoreSnapshot(agentId: string, snapshotId: string): Promise<{ restored: WorkspaceSnapshot; previous?: string }> {
    return this.request('POST', `${agentPath(agentId)}/snapshots/${encodeURIComponent(snapshotId)}/restore`);
  }

  /** DELETE /api/app/agents/:id/snapshots/:sid. */
  async deleteSnapshot(agentId: string, snapshotId: string): Promise<void> {
    await this.request<void>('DELETE', `${agentPath(agentId)}/snapshots/${encodeURIComponent(snapshotId)}`);
  }

  /** GET /api/app/agents/:id. */
  getAgent(id: string): Promise<Agent> {
    return this.request<Agent>('GET', agentPath(id));
  }

  /** PATCH /api/app/agents/:id. */
  renameAgent(id: string, name: string): Promise<Agent> {
    return this.request<Agent>('PATCH', agentPath(id), { name });
  }

  /**
   * DELETE /api/app/agents/:id. Without options the server stops and removes the agent's own
   * desktop and keeps its work files; deleteData deletes them too (only on request).
   */
  async deleteAgent(id: string, opts?: DeleteAgentOptions): Promise<void> {
    await this.request<void>('DELETE', agentPath(id), opts);
  }

  /** GET /api/app/agents/:id/deletion: the desktops and data deleting the agent concerns, with sizes (measure false: at once, sizes -1). */
  agentDeletion(id: string, measure = true): Promise<AgentDeletion> {
    return this.request<AgentDeletion>('GET', `${agentPath(id)}/deletion${measure ? '' : '?sizes=0'}`);
  }

  /** PUT /api/app/agents/:id/workdir. */
  setWorkDir(id: string, workdir: string): Promise<{ agent: Agent; rebuilt: boolean }> {
    return this.request<{ agent: Agent; rebuilt: boolean }>('PUT', `${agentPath(id)}/workdir`, { workdir });
  }

  /** PUT /api/app/agents/:id/lazy-init. */
  setLazyInit(id: string, lazyInit: boolean): Promise<Agent> {
    return this.request<Agent>('PUT', `${agentPath(id)}/lazy-init`, { lazyInit });
  }

  /** GET /api/app/agents/:id/computer-plan: the computer of the next and the latest turn. */
  computerPlan(id: string): Promise<ComputerPlan> {
    return this.request<ComputerPlan>('GET', `${agentPath(id)}/computer-plan`);
  }

  /**
   * POST /api/app/agents/:id/opened: a person opened the agent; its desktop starts if its next
   * turn would use one and a capacity slot is free (answers when that start is done).
   */
  agentOpened(id: string): Promise<Anticipation> {
    return this.request<Anticipation>('POST', `${agentPath(id)}/opened`);
  }

  /** GET /api/app/admin/host (admin only). */
  host(): Promise<HostView> {
    return this.request<HostView>('GET', '/api/app/admin/host');
  }

  /** PUT /api/app/admin/host (admin only): "Host screen control" of the node. */
  setHostScreenControl(requestId: string, screenControl: boolean): Promise<HostView> {
    return this.request<HostView>('PUT', '/api/app/admin/host', { requestId, screenControl });
  }

  /** POST /api/app/admin/local-vm/instances/:id/:action (admin only): any desktop of the node. */
  adminDesktopAction(id: string, action: 'stop' | 'remove', force = false, node?: string): Promise<InstanceView> {
    return this.request<InstanceView>(
      'POST',
      `/api/app/admin/local-vm/instances/${encodeURIComponent(id)}/${action}${nodeQuery(node)}`,
      force ? { force } : undefined,
    );
  }

  /** GET /api/app/admin/housekeeping (admin only): leftovers on the engine. */
  leftovers(): Promise<Leftovers> {
    return this.request<Leftovers>('GET', '/api/app/admin/housekeeping');
  }

  /** POST /api/app/admin/housekeeping/clean (admin only): removes exactly the named leftovers. */
  cleanLeftovers(sel: LeftoverSelection): Promise<{ outcomes: CleanOutcome[]; leftovers: Leftovers }> {
    return this.request<{ outcomes: CleanOutcome[]; leftovers: Leftovers }>('POST', '/api/app/admin/housekeeping/clean', sel);
  }

  /** PUT /api/app/agents/:id/computer-selection; returns the agent as the server saved it. */
  setComputerSelection(id: string, selection: ComputerSelection): Promise<Agent> {
    return this.request<Agent>('PUT', `${agentPath(id)}/computer-selection`, selection);
  }

  /** GET /api/app/agents/:id/model (the agent's owner or an administrator). */
  getAgentModel(id: string): Promise<AgentModel> {
    return this.request<AgentModel>('GET', `${agentPath(id)}/model`);
  }

  /** PUT /api/app/agents/:id/model; all fields empty inherits the app's model; apiKey omitted keeps, "" clears. */
  setAgentModel(id: string, u: ModelUpdate): Promise<AgentModel> {
    return this.request<AgentModel>('PUT', `${agentPath(id)}/model`, u);
  }

  /** POST /api/app/agents/:id/model/test: one tiny real request with the agent's model. */
  testAgentModel(id: string): Promise<ModelTestResult> {
    return this.request<ModelTestResult>('POST', `${agentPath(id)}/model/test`);
  }

  /** GET /api/app/agents/:id/model/models: the models the agent's saved endpoint offers. */
  listAgentModels(id: string): Promise<ModelList> {
    return this.request<ModelList>('GET', `${agentPath(id)}/model/models`);
  }

  /** GET /api/app/admin/model/models (admin only): the models the app's saved endpoint offers. */
  listModels(): Promise<ModelList> {
    return this.request<ModelList>('GET', '/api/app/admin/model/models');
  }

  /** POST /api/app/admin/model/test (admin only): one tiny real request with the app's model. */
  testModel(): Promise<ModelTestResult> {
    return this.request<ModelTestResult>('POST', '/api/app/admin/model/test');
  }

  /** GET /api/app/admin/setup (admin only): the first-run steps with what to do. */
  adminSetup(): Promise<SetupStatus> {
    return this.request<SetupStatus>('GET', '/api/app/admin/setup');
  }

  /** GET /api/app/setup: which first-run steps are missing (states only; agents are the caller's). */
  setup(): Promise<SetupStatus> {
    return this.request<SetupStatus>('GET', '/api/app/setup');
  }

  /** POST /api/app/admin/setup/image/cancel (admin only): cancels the standard image's running preparation. */
  cancelImagePrepare(): Promise<PrepareState> {
    return this.request<PrepareState>('POST', '/api/app/admin/setup/image/cancel');
  }

  /** GET /api/app/admin/doctor (admin only). */
  async doctor(): Promise<DoctorCheck[]> {
    const res = await this.request<{ checks: DoctorCheck[] | null }>('GET', '/api/app/admin/doctor');
    return res.checks ?? [];
  }

  /** GET /api/app/admin/model (admin only). */
  getModel(): Promise<ModelSettings> {
    return this.request<ModelSettings>('GET', '/api/app/admin/model');
  }

  /** PUT /api/app/admin/model (admin only); the key is never sent back. */
  setModel(u: ModelUpdate): Promise<ModelSettings> {
    return this.request<ModelSettings>('PUT', '/api/app/admin/model', u);
  }

  /** GET /api/app/knowledge: how many past runs the caller's account has, and the retrieval mode. */
  knowledgeStats(): Promise<KnowledgeStats> {
    return this.request<KnowledgeStats>('GET', '/api/app/knowledge');
  }

  /** GET /api/app/knowledge/search: the caller's account's past runs best matching q ("ask past runs"). */
  searchKnowledge(q: string, limit?: number): Promise<KnowledgeResult> {
    const params = new URLSearchParams({ q });
    if (limit !== undefined) params.set('limit', String(limit));
    return this.request<KnowledgeResult>('GET', `/api/app/knowledge/search?${params.toString()}`);
  }

  /** DELETE /api/app/admin/knowledge (admin only): one account's past runs, or every account's without one. */
  clearKnowledge(account?: string): Promise<{ removed: number; account: string }> {
    const q = account === undefined ? '' : `?account=${encodeURIComponent(account)}`;
    return this.request<{ removed: number; account: string }>('DELETE', `/api/app/admin/knowledge${q}`);
  }

  /** GET /api/app/admin/knowledge/embeddings (admin only). */
  getEmbeddings(): Promise<EmbeddingsSettings> {
    return this.request<EmbeddingsSettings>('GET', '/api/app/admin/knowledge/embeddings');
  }

  /** PUT /api/app/admin/knowledge/embeddings (admin only); the key is never sent back. */
  setEmbeddings(u: EmbeddingsUpdate): Promise<EmbeddingsSettings> {
    return this.request<EmbeddingsSettings>('PUT', '/api/app/admin/knowledge/embeddings', u);
  }

  /** GET /api/app/admin/runners (admin only). */
  async listRunners(): Promise<Runner[]> {
    const res = await this.request<{ runners: Runner[] | null }>('GET', '/api/app/admin/runners');
    return res.runners ?? [];
  }

  /** POST /api/app/admin/runners (admin only): the token is in this answer only. */
  createRunner(name: string, cloud: boolean, serverUrl?: string): Promise<CreatedRunner> {
    const body: Record<string, unknown> = { name, cloud };
    if (serverUrl) body.serverUrl = serverUrl;
    return this.request<CreatedRunner>('POST', '/api/app/admin/runners', body);
  }

  /** PATCH /api/app/admin/runners/:id {cloud} (admin only): marks the runner as a cloud node or not. */
  setRunnerCloud(id: string, cloud: boolean): Promise<Runner> {
    return this.request<Runner>('PATCH', `/api/app/admin/runners/${encodeURIComponent(id)}`, { cloud });
  }

  /** DELETE /api/app/admin/runners/:id (admin only): revokes; its link drops at once. */
  async revokeRunner(id: string): Promise<void> {
    await this.request<void>('DELETE', `/api/app/admin/runners/${encodeURIComponent(id)}`);
  }

  /** GET /api/app/admin/runner-channels (admin only). */
  runnerChannels(): Promise<RunnerChannels> {
    return this.request<RunnerChannels>('GET', '/api/app/admin/runner-channels');
  }

  /** PUT /api/app/admin/runner-channels (admin only). */
  setRunnerChannels(c: { release: RunnerChannel; canary: RunnerChannel }): Promise<RunnerChannels> {
    return this.request<RunnerChannels>('PUT', '/api/app/admin/runner-channels', { release: c.release, canary: c.canary });
  }

  /** PUT /api/app/admin/runners/:id/channel (admin only). */
  setRunnerChannel(id: string, channel: RunnerChannelName): Promise<{ id: string; channel: RunnerChannelName }> {
    return this.request('PUT', `/api/app/admin/runners/${encodeURIComponent(id)}/channel`, { channel });
  }

  /** POST /api/app/admin/runners/:id/update (admin only): answers once the runner verified the new binary. */
  updateRunner(id: string): Promise<{ id: string; from: string; version: string }> {
    return this.request('POST', `/api/app/admin/runners/${encodeURIComponent(id)}/update`);
  }

  /** PUT /api/app/agents/:id/node: places the agent's desktop on a node ("local" or a runner's id). */
  setAgentNode(id: string, nodeId: string): Promise<{ agentId: string; nodeId: string }> {
    return this.request('PUT', `${agentPath(id)}/node`, { nodeId });
  }

  /** PUT /api/auth/password: the caller's own password; every other session of the account ends. */
  async changePassword(currentPassword: string, newPassword: string): Promise<User> {
    const res = await this.request<{ user: User }>('PUT', '/api/auth/password', { currentPassword, newPassword });
    return res.user;
  }

  /** GET /api/app/admin/users (admin only). */
  async listUsers(): Promise<Account[]> {
    const res = await this.request<{ users: Account[] | null }>('GET', '/api/app/admin/users');
    return res.users ?? [];
  }

  /** POST /api/app/admin/users (admin only). */
  createUser(username: string, password: string, role: 'admin' | 'member'): Promise<Account> {
    return this.request<Account>('POST', '/api/app/admin/users', { username, password, role });
  }

  /** PUT /api/app/admin/users/:id (admin only); disabling or a new password ends its sessions. */
  updateUser(id: string, change: AccountChange): Promise<Account> {
    return this.request<Account>('PUT', `/api/app/admin/users/${encodeURIComponent(id)}`, change);
  }

  /** DELETE /api/app/admin/users/:id (admin only); withAgents deletes the account's agents too. */
  async deleteUser(id: string, withAgents: boolean): Promise<void> {
    const q = withAgents ? '?deleteAgents=1' : '';
    await this.request<void>('DELETE', `/api/app/admin/users/${encodeURIComponent(id)}${q}`);
  }

  /** PUT /api/app/admin/users/:id/host-access (admin only). */
  setHostAccess(id: string, nodeId: string, access: Partial<HostAccess>): Promise<Account> {
    return this.request<Account>('PUT', `/api/app/admin/users/${encodeURIComponent(id)}/host-access`, {
      nodeId,
      ...access,
    });
  }

  /** GET /api/app/admin/security (admin only). */
  getSecurity(): Promise<SecuritySettings> {
    return this.request<SecuritySettings>('GET', '/api/app/admin/security');
  }

  /** PUT /api/app/admin/security (admin only). */
  setSecurity(u: SecurityUpdate): Promise<SecuritySettings> {
    return this.request<SecuritySettings>('PUT', '/api/app/admin/security', u);
  }

  /** GET /api/app/admin/egress (admin only); node: a runner's id ('' = this server's own node). */
  getEgress(node = ''): Promise<EgressView> {
    return this.request<EgressView>('GET', '/api/app/admin/egress' + (node ? `?node=${encodeURIComponent(node)}` : ''));
  }

  /** PUT /api/app/admin/egress/nodes/:node (admin only). */
  setNodeEgress(node: string, p: { mode: string; allow?: string[] }): Promise<EgressView> {
    return this.request<EgressView>('PUT', `/api/app/admin/egress/nodes/${encodeURIComponent(node)}`, p);
  }

  /** PUT /api/app/admin/egress/agents/:id (admin only); null gives the agent the node's policy again. */
  setAgentEgress(agentId: string, p: { mode: string; allow?: string[] } | null): Promise<EgressView> {
    const path = `/api/app/admin/egress/agents/${encodeURIComponent(agentId)}`;
    return p === null ? this.request<EgressView>('DELETE', path) : this.request<EgressView>('PUT', path, p);
  }

  /** POST /api/app/admin/egress/allow (admin only): allow a refused destination (node '' = this server's own). */
  allowEgress(agentId: string, destination: string, node = ''): Promise<EgressView> {
    return this.request<EgressView>('POST', '/api/app/admin/egress/allow', { node, agentId, destination });
  }

  /** GET /api/app/admin/sandbox (admin only): the host sandbox's refusals and widenings. */
  getSandbox(): Promise<SandboxReview> {
    return this.request<SandboxReview>('GET', '/api/app/admin/sandbox');
  }

  /** POST /api/app/admin/sandbox/refusals/:id/approve (admin only); scope: path | directory (a write). */
  approveWidening(id: string, scope: 'path' | 'directory'): Promise<SandboxReview & { widening: SandboxWidening }> {
    return this.request('POST', `/api/app/admin/sandbox/refusals/${encodeURIComponent(id)}/approve`, { scope });
  }

  /** POST /api/app/admin/sandbox/revoke (admin only). */
  revokeWidening(w: SandboxWidening): Promise<SandboxReview & { widening: SandboxWidening }> {
    return this.request('POST', '/api/app/admin/sandbox/revoke', w);
  }

  /** GET /api/app/admin/security/allow-rules (admin only): every saved rule. */
  async allowRules(): Promise<AllowRule[]> {
    const res = await this.request<{ rules: AllowRule[] | null }>('GET', '/api/app/admin/security/allow-rules');
    return res.rules ?? [];
  }

  /** POST /api/app/admin/security/allow-rules (admin only); agentId "" = every agent. */
  addAllowRule(r: { agentId?: string; tool: string; command?: string; pattern?: string }): Promise<AllowRule> {
    return this.request<AllowRule>('POST', '/api/app/admin/security/allow-rules', r);
  }

  /** DELETE /api/app/admin/security/allow-rules/:id?agentId= (admin only). */
  async deleteAllowRule(rule: AllowRule): Promise<void> {
    await this.request<void>(
      'DELETE',
      `/api/app/admin/security/allow-rules/${encodeURIComponent(rule.id)}?agentId=${encodeURIComponent(rule.agentId ?? '')}`,
    );
  }

  /** GET /api/app/admin/security/confirmations (admin only): newest first. */
  async confirmations(limit = 100): Promise<Confirmation[]> {
    const res = await this.request<{ confirmations: Confirmation[] | null }>(
      'GET',
      `/api/app/admin/security/confirmations?limit=${limit}`,
    );
    return res.confirmations ?? [];
  }

  /** GET /api/app/admin/mcp-servers (admin only). */
  async listMcpServers(): Promise<McpServer[]> {
    const res = await this.request<{ servers: McpServer[] | null }>('GET', '/api/app/admin/mcp-servers');
    return res.servers ?? [];
  }

  /** POST /api/app/admin/mcp-servers (admin only). */
  createMcpServer(s: McpServerInput): Promise<McpServer> {
    return this.request<McpServer>('POST', '/api/app/admin/mcp-servers', s);
  }

  /** PUT /api/app/admin/mcp-servers/:id (admin only). */
  updateMcpServer(id: string, s: McpServerInput): Promise<McpServer> {
    return this.request<McpServer>('PUT', `/api/app/admin/mcp-servers/${encodeURIComponent(id)}`, s);
  }

  /** DELETE /api/app/admin/mcp-servers/:id (admin only). */
  async deleteMcpServer(id: string): Promise<void> {
    await this.request<unknown>('DELETE', `/api/app/admin/mcp-servers/${encodeURIComponent(id)}`);
  }

  /** GET /api/app/agents/:id/mcp-servers: every server, with whether the agent uses it. */
  async agentMcpServers(agentId: string): Promise<AgentMcpServer[]> {
    const res = await this.request<{ servers: AgentMcpServer[] | null }>('GET', `/api/app/agents/${encodeURIComponent(agentId)}/mcp-servers`);
    return res.servers ?? [];
  }

  /** PUT /api/app/agents/:id/mcp-servers {ids}: the servers the agent uses. */
  async setAgentMcpServers(agentId: string, ids: string[]): Promise<AgentMcpServer[]> {
    const res = await this.request<{ servers: AgentMcpServer[] | null }>('PUT', `/api/app/agents/${encodeURIComponent(agentId)}/mcp-servers`, { ids });
    return res.servers ?? [];
  }

  /** GET /api/app/agents/:id/allow-rules: the agent's own "always allow" rules. */
  async agentAllowRules(id: string): Promise<AllowRule[]> {
    const res = await this.request<{ rules: AllowRule[] | null }>('GET', `${agentPath(id)}/allow-rules`);
    return res.rules ?? [];
  }

  /** DELETE /api/app/agents/:id/allow-rules/:rule. */
  async deleteAgentAllowRule(id: string, rule: string): Promise<void> {
    await this.request<void>('DELETE', `${agentPath(id)}/allow-rules/${encodeURIComponent(rule)}`);
  }

  /** DELETE /api/app/admin/local-vm/instances/:id/data (admin only): the retained workspace and profile. */
  async deleteDesktopData(instanceId: string, node?: string): Promise<void> {
    await this.request<void>('DELETE', `/api/app/admin/local-vm/instances/${encodeURIComponent(instanceId)}/data${nodeQuery(node)}`);
  }

  /** GET /api/app/admin/local-vm (admin only); node: a runner's id (default this computer). */
  localVM(node?: string): Promise<LocalVMStatus> {
    return this.request<LocalVMStatus>('GET', `/api/app/admin/local-vm${nodeQuery(node)}`);
  }

  /** GET /api/app/admin/local-vm/engine (admin only). */
  engine(): Promise<EngineStatus> {
    return this.request<EngineStatus>('GET', '/api/app/admin/local-vm/engine');
  }

  /** PUT /api/app/admin/local-vm/engine: checked (a cluster is connected first) and saved; applies at the next start. */
  setEngine(requestId: string, s: EngineSettings): Promise<EngineStatus> {
    return this.request<EngineStatus>('PUT', '/api/app/admin/local-vm/engine', { requestId, ...s });
  }

  /** POST /api/app/admin/local-vm/prepare: starts (or joins) a preparation; poll localVM(). */
  prepareImage(imageKey: string, node?: string): Promise<PrepareState> {
    return this.request<PrepareState>('POST', `/api/app/admin/local-vm/prepare${nodeQuery(node)}`, { imageKey });
  }

  /** PUT /api/app/admin/local-vm/image-sources (admin only). */
  setImageSources(u: ImageSourcesUpdate, node?: string): Promise<ImageSources> {
    return this.request<ImageSources>('PUT', `/api/app/admin/local-vm/image-sources${nodeQuery(node)}`, u);
  }

  /** PUT /api/app/admin/local-vm/policy. */
  setVMPolicy(isolation: string, maxInstances: number, node?: string): Promise<VMPolicy> {
    return this.request<VMPolicy>('PUT', `/api/app/admin/local-vm/policy${nodeQuery(node)}`, { isolation, maxInstances });
  }

  /**
   * PUT /api/app/admin/local-vm/idle-policy (0 minutes = never). pauseAfterMinutes pauses an idle
   * desktop first (0 = never; left out: unchanged).
   */
  setIdlePolicy(requestId: string, idleStopMinutes: number, node?: string, pauseAfterMinutes?: number): Promise<VMPolicy> {
    return this.request<VMPolicy>('PUT', `/api/app/admin/local-vm/idle-policy${nodeQuery(node)}`, {
      requestId,
      idleStopMinutes,
      ...(pauseAfterMinutes === undefined ? {} : { pauseAfterMinutes }),
    });
  }

  /** GET /api/app/agents/:id/local-vm. */
  agentVM(id: string): Promise<AgentVM> {
    return this.request<AgentVM>('GET', `${agentPath(id)}/local-vm`);
  }

  /**
   * POST /api/app/agents/:id/local-vm/:action: create, start, stop, recreate, remove; pause
   * (a running desktop: memory kept, no CPU) and resume.
   */
  agentVMAction(id: string, action: VMAction): Promise<AgentVM> {
    return this.request<AgentVM>('POST', `${agentPath(id)}/local-vm/${action}`);
  }

  /** PUT /api/app/agents/:id/local-vm/image. */
  setAgentImage(id: string, imageKey: string): Promise<AgentVM> {
    return this.request<AgentVM>('PUT', `${agentPath(id)}/local-vm/image`, { imageKey });
  }

  /** PUT /api/app/agents/:id/local-vm/image with a fixed (Compose) desktop instead of an image. */
  chooseDesktop(id: string, desktop: string): Promise<AgentVM> {
    return this.request<AgentVM>('PUT', `${agentPath(id)}/local-vm/image`, { desktop });
  }

  /** GET /api/app/chat/sessions?agentId=. */
  async chatSessions(agentId: string): Promise<ChatSessionInfo[]> {
    const res = await this.request<{ sessions: ChatSessionInfo[] | null }>(
      'GET',
      `/api/app/chat/sessions?agentId=${encodeURIComponent(agentId)}`,
    );
    return res.sessions ?? [];
  }

  /** GET /api/app/chat/sessions/:id. */
  chatSession(id: string): Promise<ChatSessionFull> {
    return this.request<ChatSessionFull>('GET', `/api/app/chat/sessions/${encodeURIComponent(id)}`);
  }

  /** GET /api/app/chat/sessions/:id/history: the execution timeline. */
  chatTimeline(id: string): Promise<Timeline> {
    return this.request<Timeline>('GET', `/api/app/chat/sessions/${encodeURIComponent(id)}/history`);
  }

  /** GET /api/app/chat/sessions/:id/history.jsonl: the execution history as JSON Lines. */
  async historyExport(id: string): Promise<string> {
    const headers: Record<string, string> = { Accept: 'application/jsonl' };
    if (this.usesToken) headers['Authorization'] = `Bearer ${this.token}`;
    let res: Response;
    try {
      res = await this.send(`${this.baseUrl}/api/app/chat/sessions/${encodeURIComponent(id)}/history.jsonl`, {
        headers,
        credentials: this.usesToken ? 'omit' : 'same-origin',
      });
    } catch (err) {
      const why = err instanceof Error ? err.message : String(err);
      throw new ApiError(0, 'network', `Cannot reach the Cubicle server (${why}).`);
    }
    if (!res.ok) {
      const err = await errorFrom(res);
      if (res.status === 401) this.onUnauthenticated?.();
      throw err;
    }
    return res.text();
  }

  /** POST /api/app/chat/external: the result of a tool this client ran for the agent. */
  chatExternal(body: ExternalResult): Promise<{ accepted: boolean }> {
    return this.request<{ accepted: boolean }>('POST', '/api/app/chat/external', body);
  }

  /** GET /api/app/agents/:id/recordings: the recordings of the agent's desktop, newest first. */
  recordings(agentId: string): Promise<Recording[]> {
    return this.request<Recording[]>('GET', `/api/app/agents/${encodeURIComponent(agentId)}/recordings`);
  }

  /** GET /api/app/agents/:id/recordings/:rid. */
  recording(agentId: string, rid: string): Promise<Recording> {
    return this.request<Recording>('GET', `/api/app/agents/${encodeURIComponent(agentId)}/recordings/${encodeURIComponent(rid)}`);
  }

  /** DELETE /api/app/agents/:id/recordings/:rid (its owner, or an administrator). */
  deleteRecording(agentId: string, rid: string): Promise<void> {
    return this.request<void>('DELETE', `/api/app/agents/${encodeURIComponent(agentId)}/recordings/${encodeURIComponent(rid)}`);
  }

  /** GET …/recordings/:rid/markers/:n/screenshot: the screenshot the agent received at marker n. */
  async recordingScreenshot(agentId: string, rid: string, n: number): Promise<Blob> {
    const headers: Record<string, string> = {};
    if (this.usesToken) headers['Authorization'] = `Bearer ${this.token}`;
    const res = await this.send(
      `${this.baseUrl}/api/app/agents/${encodeURIComponent(agentId)}/recordings/${encodeURIComponent(rid)}/markers/${n}/screenshot`,
      { headers, credentials: this.usesToken ? 'omit' : 'same-origin' },
    );
    if (!res.ok) throw await errorFrom(res);
    return res.blob();
  }

  /** GET /api/app/agents/:id/files?dir=: the top level of the desktop's workspace or ~/Downloads. */
  desktopFiles(agentId: string, dir: DesktopFolder): Promise<DesktopFileList> {
    return this.request<DesktopFileList>('GET', `/api/app/agents/${encodeURIComponent(agentId)}/files?dir=${dir}`);
  }

  /**
   * GET /api/app/agents/:id/files/changes?dir=: answers when something in the folder changes
   * (true) or after timeout seconds (false): the Files drawer follows the folder with it.
   */
  desktopFilesChanged(agentId: string, dir: DesktopFolder, timeout: number, signal?: AbortSignal): Promise<boolean> {
    return this.request<{ changed: boolean }>(
      'GET', `/api/app/agents/${encodeURIComponent(agentId)}/files/changes?dir=${dir}&timeout=${timeout}`, undefined, { signal },
    ).then((r) => r.changed);
  }

  /** The address of GET /api/app/agents/:id/files/download (works as a link with the session cookie). */
  desktopFileUrl(agentId: string, dir: DesktopFolder, path: string): string {
    const q = new URLSearchParams({ dir, path });
    return `${this.baseUrl}/api/app/agents/${encodeURIComponent(agentId)}/files/download?${q}`;
  }

  /** GET …/files/download with the bearer token (the desktop shell, where a link carries no login). */
  async desktopFileBlob(agentId: string, dir: DesktopFolder, path: string): Promise<Blob> {
    const headers: Record<string, string> = {};
    if (this.usesToken) headers['Authorization'] = `Bearer ${this.token}`;
    const res = await this.send(this.desktopFileUrl(agentId, dir, path), { headers, credentials: this.usesToken ? 'omit' : 'same-origin' });
    if (!res.ok) throw await errorFrom(res);
    return res.blob();
  }

  /** The upload calls of one agent's desktop, for runUpload (upload.ts). */
  uploads(agentId: string): UploadTransport {
    const base = `/api/app/agents/${encodeURIComponent(agentId)}/files/upload`;
    return {
      status: (path) => this.request<UploadState>('GET', `${base}?${new URLSearchParams({ path })}`),
      put: async (path, offset, total, data) => {
        const headers: Record<string, string> = { Accept: 'application/json', 'Content-Type': 'application/octet-stream' };
        if (this.usesToken) headers['Authorization'] = `Bearer ${this.token}`;
        const q = new URLSearchParams({ path, offset: String(offset), total: String(total) });
        let res: Response;
        try {
          res = await this.fetchImpl(`${this.baseUrl}${base}?${q}`, {
            method: 'PUT',
            headers,
            body: data,
            credentials: this.usesToken ? 'omit' : 'same-origin',
          });
        } catch (err) {
          const why = err instanceof Error ? err.message : String(err);
          throw new ApiError(0, 'network', `Cannot reach the Cubicle server (${why}).`);
        }
        if (res.status === 409) {
          const body = (await res.json().catch(() => ({}))) as { offset?: unknown; error?: unknown };
          if (typeof body.offset === 'number') throw new OffsetMismatch(body.offset, String(body.error ?? 'offset mismatch'));
          throw new ApiError(409, 'conflict', String(body.error ?? 'the upload was refused'));
        }
        if (!res.ok) {
          if (res.status === 401) this.onUnauthenticated?.();
          throw await errorFrom(res);
        }
        return (await res.json()) as UploadState;
      },
    };
  }

  /** The websocket URL of a recording's replay (subprotocol cubicle.computer.v2). */
  replayUrl(loc: { protocol: string; host: string }, agentId: string, rid: string, fromMs: number, speed: number): string {
    let origin = `${loc.protocol === 'https:' ? 'wss:' : 'ws:'}//${loc.host}`;
    if (this.baseUrl !== '') origin = this.baseUrl.replace(/^http/, 'ws');
    const q = new URLSearchParams({ from: String(Math.max(0, Math.round(fromMs))), speed: String(speed) });
    if (this.usesToken) q.set('access_token', this.token ?? '');
    return `${origin}/api/app/agents/${encodeURIComponent(agentId)}/recordings/${encodeURIComponent(rid)}/replay?${q}`;
  }

  /** GET /api/app/admin/recordings (admin only). */
  recordingSettings(): Promise<RecordingSettings> {
    return this.request<RecordingSettings>('GET', '/api/app/admin/recordings');
  }

  /** PUT /api/app/admin/recordings (admin only): only the fields given change. */
  putRecordingSettings(s: Partial<Pick<RecordingSettings, 'neverRecord' | 'keepDays' | 'maxBytes'>>): Promise<RecordingSettings> {
    return this.request<RecordingSettings>('PUT', '/api/app/admin/recordings', s);
  }

  /** GET /api/app/chats: the caller's group chats, most recently used first. */
  async groupChats(): Promise<GroupChat[]> {
    const res = await this.request<{ chats: GroupChat[] | null }>('GET', '/api/app/chats');
    return res.chats ?? [];
  }

  /** POST /api/app/chats {title, agentIds}: a new group chat of the caller's agents. */
  createGroupChat(title: string, agentIds: string[]): Promise<GroupChat> {
    return this.request<GroupChat>('POST', '/api/app/chats', { title, agentIds });
  }

  /** GET /api/app/chats/:id: a group chat with its transcript. */
  groupChat(id: string): Promise<GroupTranscript> {
    return this.request<GroupTranscript>('GET', `/api/app/chats/${encodeURIComponent(id)}`);
  }

  /** POST /api/app/chat {chatId, message, to?} as an event stream: the acting member's turn (every event names its agentId). */
  async groupChatSend(body: GroupChatRequest, onEvent: (e: ChatEvent) => void, signal?: AbortSignal): Promise<void> {
    const res = await this.openStream(
      '/api/app/chat',
      { method: 'POST', body: JSON.stringify(body), signal },
      { 'Content-Type': 'application/json' },
    );
    await readStream(res, (data) => onEvent(data as ChatEvent));
  }

  /** POST /api/app/chat/stop. */
  stopChat(sessionId: string): Promise<{ stopped: boolean }> {
    return this.request<{ stopped: boolean }>('POST', '/api/app/chat/stop', { sessionId });
  }

  /**
   * POST /api/app/chat as a server-sent event stream: calls onEvent for every event until the
   * stream ends. Errors before the stream starts are ApiErrors.
   */
  async chat(body: ChatRequest, onEvent: (e: ChatEvent) => void, signal?: AbortSignal): Promise<void> {
    const res = await this.openStream(
      '/api/app/chat',
      { method: 'POST', body: JSON.stringify(body), signal },
      { 'Content-Type': 'application/json' },
    );
    await readStream(res, (data) => onEvent(data as ChatEvent));
  }

  /**
   * GET /api/app/events: the event stream, read with fetch (so the desktop window's bearer
   * token works as the cookie does). Calls onMessage for every message until the stream ends
   * (resolves) or fails (rejects with an ApiError; 401 also calls onUnauthenticated).
   * lastEventId resumes after an event seen before.
   */
  async events(onMessage: (m: StreamMessage) => void, opts: { lastEventId?: string; signal?: AbortSignal } = {}): Promise<void> {
    const res = await this.openStream(
      '/api/app/events',
      { method: 'GET', cache: 'no-store', signal: opts.signal },
      opts.lastEventId ? { 'Last-Event-ID': opts.lastEventId } : {},
    );
    try {
      await readStream(res, (data) => onMessage(data as StreamMessage));
    } catch (err) {
      if (opts.signal?.aborted) return;
      const why = err instanceof Error ? err.message : String(err);
      throw new ApiError(0, 'network', `The event stream broke off (${why}).`);
    }
  }

  /**
   * openStream starts a server-sent event stream at path: the answer once it is a success;
   * otherwise an ApiError (a network failure, or the server's error; 401 also calls
   * onUnauthenticated).
   */
  private async openStream(path: string, init: Omit<RequestInit, 'headers'>, extra: Record<string, string> = {}): Promise<Response> {
    const headers: Record<string, string> = { Accept: 'text/event-stream', ...extra };
    if (this.usesToken) headers['Authorization'] = `Bearer ${this.token}`;
    let res: Response;
    try {
      res = await this.send(this.baseUrl + path, {
        ...init,
        headers,
        credentials: this.usesToken ? 'omit' : 'same-origin',
      });
    } catch (err) {
      const why = err instanceof Error ? err.message : String(err);
      throw new ApiError(0, 'network', `Cannot reach the Cubicle server (${why}).`);
    }
    if (!res.ok) {
      const err = await errorFrom(res);
      if (res.status === 401) this.onUnauthenticated?.();
      throw err;
    }
    return res;
  }

  /** The base URL ('' = same origin) and bearer token, for the websocket channel. */
  get connection(): { baseUrl: string; token: string } {
    return { baseUrl: this.baseUrl, token: this.token ?? '' };
  }

  /**
   * send is fetch, tried once more for a GET that failed on the network: Chromium fails the
   * requests in flight with net::ERR_NETWORK_CHANGED whenever the host's network interfaces
   * change — as they do each time a desktop's container network comes up on this machine —
   * and a GET changes nothing, so sending it again is safe. Other methods are never re-sent.
   * Every request of the client goes through it but the uploads' PUTs.
   */
  private async send(url: string, init: RequestInit): Promise<Response> {
    try {
      return await this.fetchImpl(url, init);
    } catch (err) {
      if ((init.method ?? 'GET') !== 'GET' || init.signal?.aborted) throw err;
      await new Promise((resolve) => setTimeout(resolve, RETRY_GET_AFTER_MS));
      if (init.signal?.aborted) throw err;
      return await this.fetchImpl(url, init);
    }
  }

  private async request<T>(
    method: Method,
    path: string,
    body?: unknown,
    opts: { redirectOn401?: boolean; signal?: AbortSignal } = {},
  ): Promise<T> {
    const headers: Record<string, string> = { Accept: 'application/json' };
    if (method !== 'GET') {
      // State-changing requests always declare JSON, body or not: the server requires it.
      headers['Content-Type'] = 'application/json';
    }
    if (this.usesToken) {
      headers['Authorization'] = `Bearer ${this.token}`;
    }
    const init: RequestInit = {
      method,
      headers,
      credentials: this.usesToken ? 'omit' : 'same-origin',
    };
    if (opts.signal) init.signal = opts.signal;
    if (body !== undefined) {
      init.body = JSON.stringify(body);
    }

    let res: Response;
    try {
      res = await this.send(this.baseUrl + path, init);
    } catch (err) {
      const why = err instanceof Error ? err.message : String(err);
      throw new ApiError(0, 'network', `Cannot reach the Cubicle server (${why}).`);
    }

    if (!res.ok) {
      const err = await errorFrom(res);
      if (res.status === 401 && opts.redirectOn401 !== false) {
        this.onUnauthenticated?.();
      }
      throw err;
    }
    if (res.status === 204) {
      return undefined as T;
    }
    const text = await res.text();
    if (text === '') {
      return undefined as T;
    }
    try {
      return JSON.parse(text) as T;
    } catch {
      throw new ApiError(res.status, 'unknown', `The server sent a response that is not JSON (${method} ${path}).`);
    }
  }
}

async function errorFrom(res: Response): Promise<ApiError> {
  let message = '';
  let code: unknown;
  try {
    const text = await res.text();
    const body = JSON.parse(text) as { error?: unknown; code?: unknown };
    if (typeof body.error === 'string') message = body.error;
    code = body.code;
  } catch {
    // Not JSON (a proxy page, an empty body): fall back to the status line.
  }
  if (message === '') {
    message = `${res.status} ${res.statusText || 'request failed'}`.trim();
  }
  return new ApiError(res.status, codeFor(res.status, code), message);
}

/**
 * readStream reads a server-sent event stream to its end, calling onData with each message's
 * JSON (messages that are not JSON are skipped: unknown events are tolerated). A failed read
 * rejects with the reader's error.
 */
async function readStream(res: Response, onData: (data: unknown) => void): Promise<void> {
  const parser = new SSEParser();
  const emit = (chunk: string) => {
    for (const data of parser.push(chunk)) {
      try {
        onData(JSON.parse(data));
      } catch {
        // not JSON: skip
      }
    }
  };
  if (!res.body) {
    emit((await res.text()) + '\n\n');
    return;
  }
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    emit(dec.decode(value, { stream: true }));
  }
  emit(dec.decode() + '\n\n');
}
