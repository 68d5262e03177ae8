// Settings → Local VM → Image sources (admin only, SPEC §1.2): the base images the two desktop
// images are built from, pinned by digest, so that a private mirror or registry can serve them.
// Empty fields inherit the environment's value or the built-in pin. The server validates and
// answers with the values in force; nothing is decided here.

import { useEffect, useState } from 'preact/hooks';
import type { Client, ImageSourceView, ImageSources, LocalVMStatus } from '../api';
import { messageFor } from '../errors';

const originText: Record<string, string> = {
  settings: 'saved here',
  environment: 'from the environment',
  default: 'built in',
};

const baseSourceText: Record<string, string> = {
  auto: 'pulled by digest; on a Linux host without a registry it is built offline with debootstrap instead',
  pull: 'only pulled by digest (CUBICLE_BASE_SOURCE=pull)',
  debootstrap: 'only built offline with debootstrap on this host (CUBICLE_BASE_SOURCE=debootstrap)',
};

interface Fields {
  stdImage: string;
  stdDigest: string;
  curImage: string;
  curDigest: string;
}

const savedFields = (s: ImageSources): Fields => ({
  stdImage: s.standard.savedImage,
  stdDigest: s.standard.savedDigest,
  curImage: s.cursor.savedImage,
  curDigest: s.cursor.savedDigest,
});

/** The image sources card; status is the Local VM status it lives in. */
export function ImageSourcesCard({
  client,
  status,
  onChanged,
  node,
  locked = '',
}: {
  client: Client;
  status: LocalVMStatus;
  onChanged: () => Promise<void>;
  /** The node the page shows (undefined = this computer). */
  node?: string;
  /** Why nothing can be changed now ('' = it can). */
  locked?: string;
}) {
  const sources = status.imageSources;
  const [fields, setFields] = useState<Fields | null>(sources ? savedFields(sources) : null);
  const [dirty, setDirty] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState('');
  const [saved, setSaved] = useState('');
  // Follow the server while nothing is being edited.
  useEffect(() => {
    if (sources && !dirty && !busy) setFields(savedFields(sources));
  }, [sources?.standard.savedImage, sources?.standard.savedDigest, sources?.cursor.savedImage, sources?.cursor.savedDigest]);

  if (!sources || fields === null) return null;

  const edit = (k: keyof Fields, v: string) => {
    setFields({ ...fields, [k]: v });
    setDirty(true);
    setSaved('');
  };
  const save = async (f: Fields, note: string) => {
    setBusy(true);
    setError('');
    setSaved('');
    try {
      const v = await client.setImageSources({
        standard: { image: f.stdImage.trim(), digest: f.stdDigest.trim() },
        cursor: { image: f.curImage.trim(), digest: f.curDigest.trim() },
      }, node);
      setFields(savedFields(v));
      setDirty(false);
      setSaved(note);
      await onChanged();
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };
  const reset = { stdImage: '', stdDigest: '', curImage: '', curDigest: '' };
  const anySaved = Object.values(savedFields(sources)).some((v) => v !== '');

  return (
    <form
      class="card"
      id="sources-card"
      onSubmit={(e) => {
        e.preventDefault();
        void save(fields, 'Saved. Prepare the image again to build it from the new source.');
      }}
    >
      <div class="card-head">
        <h3>Image sources</h3>
      </div>
      <p class="muted small">
        Preparing an image pulls its base by digest, so the base never changes under a prepared image. Point a base at a
        private mirror or registry that serves the same image; an empty field uses the environment's value or the
        built-in pin. A new digest gives a new image: running desktops keep theirs until they are recreated.
      </p>
      <SourceFields
        id="standard"
        title="Standard desktop — Debian base"
        view={sources.standard}
        image={fields.stdImage}
        digest={fields.stdDigest}
        disabled={busy || locked !== ''}
        onImage={(v) => edit('stdImage', v)}
        onDigest={(v) => edit('stdDigest', v)}
        note={`The Debian base is ${baseSourceText[sources.baseSource] ?? sources.baseSource}.`}
      />
      <SourceFields
        id="cursor"
        title="Cursor Universal base (linux/amd64)"
        view={sources.cursor}
        image={fields.curImage}
        digest={fields.curDigest}
        disabled={busy || locked !== ''}
        onImage={(v) => edit('curImage', v)}
        onDigest={(v) => edit('curDigest', v)}
      />
      <div class="form-actions">
        <button class="btn primary" type="submit" id="sources-save" disabled={busy || !dirty || locked !== ''}>
          {busy ? 'Saving…' : 'Save image sources'}
        </button>
        <button
          class="btn"
          type="button"
          id="sources-reset"
          disabled={busy || !anySaved || locked !== ''}
          onClick={() => void save(reset, 'The environment or built-in sources apply again.')}
        >
          Use the defaults
        </button>
        <span class="muted small status-line" aria-live="polite" id="sources-status">
          {saved}
        </span>
      </div>
      {error !== '' && (
        <p class="form-error" role="alert" id="sources-error">
          {error}
        </p>
      )}
    </form>
  );
}

function SourceFields(props: {
  id: string;
  title: string;
  view: ImageSourceView;
  image: string;
  digest: string;
  disabled: boolean;
  onImage: (v: string) => void;
  onDigest: (v: string) => void;
  note?: string;
}) {
  const { id, title, view } = props;
  return (
    <fieldset class="source-fields" id={`source-${id}`}>
      <legend>{title}</legend>
      <div class="form-grid">
        <label class="field">
          <span>Image (registry/repository[:tag])</span>
          <input
            id={`source-${id}-image`}
            type="text"
            spellcheck={false}
            autocomplete="off"
            placeholder={view.inherited.image}
            value={props.image}
            disabled={props.disabled}
            onInput={(e) => props.onImage(e.currentTarget.value)}
          />
        </label>
        <label class="field">
          <span>Digest (sha256:…)</span>
          <input
            id={`source-${id}-digest`}
            type="text"
            spellcheck={false}
            autocomplete="off"
            placeholder={view.inherited.digest}
            value={props.digest}
            disabled={props.disabled}
            onInput={(e) => props.onDigest(e.currentTarget.value)}
          />
        </label>
      </div>
      <p class="muted small source-in-force" id={`source-${id}-in-force`}>
        In force: <code>{view.image}</code> ({originText[view.imageFrom] ?? view.imageFrom}) at <code>{view.digest}</code> (
        {originText[view.digestFrom] ?? view.digestFrom}).
      </p>
      {props.note && (
        <p class="muted small" id={`source-${id}-note`}>
          {props.note}
        </p>
      )}
      {view.problem && (
        <p class="form-error small" role="alert" id={`source-${id}-problem`}>
          {view.problem}
        </p>
      )}
    </fieldset>
  );
}
