// The execution timeline of a chat session (SPEC §2.5): every tool run with its step,
// status and duration, the failure rate, and the totals per tool.

import { useEffect, useState } from 'preact/hooks';
import { ApiError, type Client, type Recording } from '../api';
import { useServerState } from '../hooks';
import { ReplayPlayer } from './ReplayPlayer';

const tone: Record<string, string> = {
  SUCCESS: 'ok',
  FAILED: 'fail',
  TIMEOUT: 'fail',
  INTERRUPTED: 'warn',
  RUNNING: 'pending',
  PENDING: 'pending',
};

/**
 * Which recordings a timeline has asked for: they are loaded again when a run ends, since a
 * tool call's marker is written when its result comes back (a run shows up as it starts).
 */
export function recordingsKey(runs: ReadonlyArray<{ status: string }>): string {
  const ended = runs.filter((r) => r.status !== 'RUNNING' && r.status !== 'PENDING').length;
  return `${runs.length}/${ended}`;
}

function ms(n: number): string {
  return n >= 1000 ? `${(n / 1000).toFixed(n >= 10000 ? 0 : 1)} s` : `${n} ms`;
}

/**
 * The timeline view. It follows the event stream: every tool run recorded or finished in this
 * session (timeline.entry) loads it again; nothing polls while the stream is up.
 */
export function Timeline({ client, sessionId, running, agentId }: { client: Client; sessionId: string; running: boolean; agentId?: string }) {
  const st = useServerState(() => client.chatTimeline(sessionId), [client, sessionId], {
    when: (e) => e.type === 'timeline.entry' && e.data.sessionId === sessionId,
    fallbackMs: running ? 5000 : 30_000,
  });
  // The recordings of the agent's desktop: each tool run found in one can be replayed.
  const [recs, setRecs] = useState<Recording[]>([]);
  const [player, setPlayer] = useState<{ rec: Recording; from: number } | null>(null);
  const runsKey = recordingsKey(st.data?.runs ?? []);
  useEffect(() => {
    if (!agentId) return;
    let live = true;
    client.recordings(agentId).then(
      (r) => live && setRecs(r),
      () => undefined, // no recordings (or none on this server): nothing to replay
    );
    return () => {
      live = false;
    };
  }, [client, agentId, runsKey]);
  const replayOf = (runId: string): { rec: Recording; from: number } | null => {
    for (const rec of recs) {
      const m = (rec.markers ?? []).find((m) => m.kind === 'tool' && m.runId === runId);
      if (m) return { rec, from: m.at };
    }
    return null;
  };
  const data = st.data;
  const empty = st.failure instanceof ApiError && st.failure.status === 404;
  const error = empty ? '' : st.error;

  const runs = data?.runs ?? [];
  return (
    <div class="messages filled timeline" id="timeline" aria-label="Execution timeline">
      {error !== '' && (
        <p class="form-error" role="alert">
          Could not load the timeline: {error}
        </p>
      )}
      {(empty || (data && runs.length === 0)) && (
        <div class="empty-state">
          <p class="empty-title">No tool runs in this chat yet</p>
          <p class="muted small">Every tool the agent (or an operator command) runs is recorded here.</p>
        </div>
      )}
      {data && runs.length > 0 && (
        <>
          <div class="timeline-stats" id="timeline-stats">
            <div>
              <strong>{data.total}</strong>
              <span class="muted small">runs</span>
            </div>
            <div>
              <strong>{data.failed}</strong>
              <span class="muted small">failed</span>
            </div>
            <div>
              <strong>{Math.round(data.failureRate * 100)}%</strong>
              <span class="muted small">failure rate</span>
            </div>
            <div>
              <strong>{ms(data.durationMs)}</strong>
              <span class="muted small">total time</span>
            </div>
          </div>
          <ol class="timeline-list">
            {runs.map((r) => (
              <li key={r.id} data-status={r.status}>
                <span class="timeline-step">#{r.step}</span>
                <span class="tool-name">{r.tool}</span>
                {r.source && <span class="muted small">{r.source}</span>}
                <span class={`badge ${tone[r.status] ?? ''}`}>{r.status}</span>
                <span class="muted small">{ms(r.durationMs)}</span>
                {(r.memoryBytes ?? 0) > 0 && (
                  <span class="muted small timeline-usage" title="Peak memory and CPU time of the command it ran">
                    {((r.memoryBytes ?? 0) / (1 << 20)).toFixed(1)} MiB, CPU {ms(r.cpuMillis ?? 0)}
                  </span>
                )}
                <span class="muted small timeline-time">{new Date(r.createdAt).toLocaleTimeString()}</span>
                {replayOf(r.id) && (
                  <button type="button" class="btn small replay-from" data-run={r.id} onClick={() => setPlayer(replayOf(r.id))}>
                    Replay from here
                  </button>
                )}
              </li>
            ))}
          </ol>
          {(data.byTool ?? []).length > 0 && (
            <table class="doctor-table by-tool">
              <thead>
                <tr>
                  <th scope="col">Tool</th>
                  <th scope="col">Runs</th>
                  <th scope="col">Failed</th>
                  <th scope="col">Time</th>
                  <th scope="col">Slowest</th>
                </tr>
              </thead>
              <tbody>
                {(data.byTool ?? []).map((t) => (
                  <tr key={t.tool}>
                    <th scope="row">{t.tool}</th>
                    <td>{t.count}</td>
                    <td>{t.failed}</td>
                    <td>{ms(t.durationMs)}</td>
                    <td>{ms(t.maxMs)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
        </>
      )}
      {player && agentId && (
        <ReplayPlayer
          key={`${player.rec.id}@${player.from}`}
          client={client}
          agentId={agentId}
          recording={player.rec}
          from={player.from}
          onClose={() => setPlayer(null)}
        />
      )}
    </div>
  );
}
