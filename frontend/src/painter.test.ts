import { describe, expect, it } from 'vitest';
import { maxQueuedUpdates, PointerOverlay, ScreenPainter, type Context2D, type Decoder } from './painter';
import { buildUpdate, parseUpdate, type Region, type Update } from './screen';

/** A context that records what is drawn. */
class RecordingContext {
  ops: string[] = [];
  fillStyle: string | CanvasGradient | CanvasPattern = '';
  fillRect(x: number, y: number, w: number, h: number) {
    this.ops.push(`fill ${String(this.fillStyle)} ${x},${y} ${w}x${h}`);
  }
  clearRect(x: number, y: number, w: number, h: number) {
    this.ops.push(`clear ${x},${y} ${w}x${h}`);
  }
  drawImage(img: CanvasImageSource, ...a: number[]) {
    const name = (img as unknown as { name?: string }).name ?? 'canvas';
    this.ops.push(`draw ${name} ${a.join(',')}`);
  }
}

/** A decoder whose "images" are named by their first byte and sized by the next two. */
const fakeDecode: Decoder = async (data) => {
  if (data[0] === 0xff) throw new Error('corrupt');
  return { name: `img${data[0]}`, width: data[1], height: data[2], close() {} } as unknown as ImageBitmap;
};

const img = (n: number, w: number, h: number) => new Uint8Array([n, w, h]);
const region = (enc: Region['enc'], x: number, y: number, w: number, h: number, data: Uint8Array): Region => ({ enc, x, y, w, h, data });
const upd = (id: number, key: boolean, regions: Region[], lossless = false): Update =>
  parseUpdate(buildUpdate({ id, width: 100, height: 50, key, lossless, refresh: false, regions }));
const settle = () => new Promise((r) => setTimeout(r, 0));

describe('updates on the wire', () => {
  it('round-trips every region encoding and flag', () => {
    const regions = [
      region('jpeg', 1, 2, 3, 4, img(1, 3, 4)),
      region('png', 5, 6, 7, 8, img(2, 7, 8)),
      region('fill', 0, 0, 100, 50, new Uint8Array([10, 20, 30, 255])),
      region('copy', 0, 10, 100, 40, new Uint8Array([0, 0, 0, 0])),
    ];
    const u = parseUpdate(buildUpdate({ id: 2 ** 41 + 5, width: 100, height: 50, key: true, lossless: true, refresh: true, regions }));
    expect(u).toMatchObject({ version: 2, id: 2 ** 41 + 5, width: 100, height: 50, key: true, lossless: true, refresh: true });
    expect(u.regions.map((r) => [r.enc, r.x, r.y, r.w, r.h, [...r.data]])).toEqual(regions.map((r) => [r.enc, r.x, r.y, r.w, r.h, [...r.data]]));
  });

  it('refuses broken messages', () => {
    const good = buildUpdate({ id: 1, width: 10, height: 10, key: false, lossless: false, refresh: false, regions: [region('png', 0, 0, 1, 1, img(1, 1, 1))] });
    expect(() => parseUpdate(good.slice(0, good.byteLength - 1))).toThrow(/past the end/);
    const extra = new Uint8Array(good.byteLength + 1);
    extra.set(new Uint8Array(good));
    expect(() => parseUpdate(extra.buffer)).toThrow(/after the last region/);
    const badEnc = new Uint8Array(good.slice(0));
    badEnc[32 + 8] = 9;
    expect(() => parseUpdate(badEnc.buffer)).toThrow(/unknown encoding/);
    const badFill = buildUpdate({ id: 1, width: 10, height: 10, key: false, lossless: false, refresh: false, regions: [region('fill', 0, 0, 1, 1, new Uint8Array(3))] });
    expect(() => parseUpdate(badFill)).toThrow(/fill with 3 bytes/);
  });
});

describe('ScreenPainter', () => {
  it('draws the regions of each update in order, after a keyframe sized the canvas', async () => {
    const canvas = { width: 16, height: 10 };
    const ctx = new RecordingContext();
    const sizes: string[] = [];
    const drawn: Array<[number, boolean]> = [];
    const p = new ScreenPainter(canvas, ctx as unknown as Context2D, { onSize: (w, h) => sizes.push(`${w}x${h}`), onDrawn: (id, l) => drawn.push([id, l]) }, fakeDecode);
    p.update(upd(1, true, [region('jpeg', 0, 0, 100, 50, img(1, 100, 50))]));
    p.update(upd(2, false, [
      region('copy', 0, 5, 100, 40, new Uint8Array([0, 0, 0, 10])),
      region('fill', 0, 45, 100, 5, new Uint8Array([1, 2, 3, 255])),
      region('png', 10, 10, 4, 4, img(7, 4, 4)),
    ], true));
    await settle();
    expect(sizes).toEqual(['100x50']);
    expect(ctx.ops).toEqual([
      'draw img1 0,0',
      'draw canvas 0,10,100,40,0,5,100,40',
      'fill rgb(1, 2, 3) 0,45 100x5',
      'draw img7 10,10',
    ]);
    expect(drawn).toEqual([[1, false], [2, true]]);
    expect(p.lossless).toBe(true);
  });

  it('drops what a keyframe paints over, and starts over from a keyframe when the queue overflows', async () => {
    const canvas = { width: 100, height: 50 };
    const ctx = new RecordingContext();
    let lost = 0;
    const p = new ScreenPainter(canvas, ctx as unknown as Context2D, { onLost: () => lost++ }, fakeDecode);
    p.update(upd(1, true, [region('fill', 0, 0, 100, 50, new Uint8Array([0, 0, 0, 255]))]));
    for (let i = 0; i <= maxQueuedUpdates; i++) p.update(upd(2 + i, false, [region('fill', 0, 0, 1, 1, new Uint8Array([i, 0, 0, 255]))]));
    expect(lost).toBe(1);
    p.update(upd(100, false, [region('fill', 0, 0, 1, 1, new Uint8Array([9, 9, 9, 255]))])); // ignored: no keyframe yet
    p.update(upd(101, true, [region('fill', 0, 0, 100, 50, new Uint8Array([5, 5, 5, 255]))]));
    await settle();
    expect(ctx.ops.at(-1)).toBe('fill rgb(5, 5, 5) 0,0 100x50');
    expect(ctx.ops).not.toContain('fill rgb(9, 9, 9) 0,0 1x1');
  });

  it('stretches a smaller JPEG (a lower resolution) over its region, but never a PNG', async () => {
    const ctx = new RecordingContext();
    let lost = 0;
    const p = new ScreenPainter({ width: 100, height: 50 }, ctx as unknown as Context2D, { onLost: () => lost++ }, fakeDecode);
    p.update(upd(1, true, [region('jpeg', 0, 0, 100, 50, img(3, 50, 25))]));
    await settle();
    expect(ctx.ops).toEqual(['draw img3 0,0,50,25,0,0,100,50']);
    p.update(upd(2, false, [region('png', 0, 0, 100, 50, img(4, 50, 25))]));
    await settle();
    expect(lost).toBe(1);
  });

  it('asks for a keyframe when a region cannot be decoded', async () => {
    const ctx = new RecordingContext();
    let lost = 0;
    const p = new ScreenPainter({ width: 100, height: 50 }, ctx as unknown as Context2D, { onLost: () => lost++ }, fakeDecode);
    p.update(upd(1, true, [region('png', 0, 0, 100, 50, new Uint8Array([0xff, 100, 50]))]));
    await settle();
    expect(lost).toBe(1);
    expect(ctx.ops).toEqual([]);
  });

  it('idle resolves once everything given before it is drawn', async () => {
    const ctx = new RecordingContext();
    let release: () => void = () => undefined;
    const held = new Promise<void>((r) => (release = r));
    const slow: Decoder = async (data, type) => {
      await held;
      return fakeDecode(data, type);
    };
    const p = new ScreenPainter({ width: 100, height: 50 }, ctx as unknown as Context2D, {}, slow);
    await p.idle(); // nothing queued: at once
    p.update(upd(1, true, [region('jpeg', 0, 0, 100, 50, img(1, 100, 50))]));
    p.update(upd(2, false, [region('png', 1, 1, 2, 2, img(2, 2, 2))]));
    let done = false;
    const idle = p.idle().then(() => (done = true));
    await settle();
    expect(done).toBe(false);
    release();
    await idle;
    expect(ctx.ops).toEqual(['draw img1 0,0', 'draw img2 1,1']);
  });

  it('draws only the newest whole frame (version 1)', async () => {
    const ctx = new RecordingContext();
    const p = new ScreenPainter({ width: 16, height: 10 }, ctx as unknown as Context2D, {}, fakeDecode);
    for (const n of [1, 2, 3]) p.frame({ id: n, width: 100, height: 50, mediaType: 'image/jpeg', image: img(n, 100, 50) });
    await settle();
    await settle();
    expect(ctx.ops).toEqual(['draw img1 0,0', 'draw img3 0,0']);
  });
});

describe('PointerOverlay', () => {
  it('draws the cursor at the position minus its hot spot and clears where it was', async () => {
    const ctx = new RecordingContext();
    const canvas = { width: 0, height: 0 };
    const o = new PointerOverlay(canvas, ctx as unknown as Context2D, fakeDecode);
    o.setSize(100, 50);
    o.setPosition({ type: 'pointer', x: 30, y: 20 });
    await o.setCursor({ type: 'cursor', serial: 1, width: 12, height: 19, hotX: 2, hotY: 3, png: btoa(String.fromCharCode(4, 12, 19)) });
    expect(ctx.ops).toEqual(['draw img4 28,17']);
    o.setPosition({ type: 'pointer', x: 50, y: 40 });
    expect(ctx.ops.slice(1)).toEqual(['clear 28,17 12x19', 'draw img4 48,37']);
    o.setHidden(true);
    expect(ctx.ops.at(-1)).toBe('clear 48,37 12x19');
    expect(o.drawnRect()).toBeNull();
    expect(o.cssCursor()).toMatch(/^url\(data:image\/png;base64,.+\) 2 3, default$/);
  });
});
