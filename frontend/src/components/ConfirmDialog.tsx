// A modal confirmation built on the native <dialog> element (focus trap and Esc for free).

import type { ComponentChildren } from 'preact';
import { useEffect, useRef } from 'preact/hooks';

interface ConfirmDialogProps {
  title: string;
  children: ComponentChildren;
  confirmLabel: string;
  busy?: boolean;
  error?: string;
  onConfirm: () => void;
  onCancel: () => void;
}

/** Asks before a destructive action. Rendered only while open. */
export function ConfirmDialog({ title, children, confirmLabel, busy, error, onConfirm, onCancel }: ConfirmDialogProps) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const dlg = ref.current;
    if (dlg && !dlg.open) dlg.showModal();
  }, []);
  return (
    <dialog
      ref={ref}
      class="dialog"
      aria-labelledby="confirm-title"
      onCancel={(e) => {
        e.preventDefault();
        if (!busy) onCancel();
      }}
    >
      <h2 id="confirm-title">{title}</h2>
      <div class="dialog-body">{children}</div>
      {error && (
        <p class="form-error" role="alert">
          {error}
        </p>
      )}
      <div class="dialog-actions">
        <button type="button" class="btn ghost" onClick={onCancel} disabled={busy}>
          Cancel
        </button>
        <button type="button" class="btn danger" id="confirm-button" onClick={onConfirm} disabled={busy}>
          {busy ? 'Working…' : confirmLabel}
        </button>
      </div>
    </dialog>
  );
}
