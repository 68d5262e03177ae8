// The notice settings show to people who are not administrators.

/** Only administrators change app settings (SPEC §1.1). */
export function Forbidden() {
  return (
    <div class="notice" id="settings-forbidden" role="status">
      <p>Only administrators can change app settings.</p>
    </div>
  );
}
