// Draws the computer channel's picture on a canvas: whole frames (version 1) or region
// updates applied in order (version 2), and the desktop's pointer on an overlay canvas. The
// protocol is parsed in screen.ts; this file only draws.

import type { CursorMessage, Frame, PointerMessage, Region, Update } from './screen';

/** The part of a 2D context the painter uses (a real CanvasRenderingContext2D in the app). */
export interface Context2D {
  fillStyle: string | CanvasGradient | CanvasPattern;
  fillRect(x: number, y: number, w: number, h: number): void;
  clearRect(x: number, y: number, w: number, h: number): void;
  drawImage(image: CanvasImageSource, dx: number, dy: number): void;
  drawImage(image: CanvasImageSource, sx: number, sy: number, sw: number, sh: number, dx: number, dy: number, dw: number, dh: number): void;
}

/** The part of a canvas the painter uses. */
export interface CanvasLike {
  width: number;
  height: number;
}

/** Decodes an encoded image; the app uses createImageBitmap without colour management. */
export type Decoder = (data: Uint8Array, type: 'image/jpeg' | 'image/png') => Promise<ImageBitmap>;

/** createImageBitmap as the painter needs it: exact pixels (no colour conversion). */
export const decodeImage: Decoder = (data, type) =>
  createImageBitmap(new Blob([data as BlobPart], { type }), { colorSpaceConversion: 'none', premultiplyAlpha: 'none' });

/** Limits of the painter's queue: past them it drops what waits and asks for a keyframe. */
export const maxQueuedUpdates = 60;
export const maxQueuedBytes = 16 << 20;

/** What a ScreenPainter reports. */
export interface PainterHooks {
  /** The screen has a (new) size. */
  onSize?: (width: number, height: number) => void;
  /** A frame or update was drawn; lossless: the picture is now exact. */
  onDrawn?: (id: number, lossless: boolean) => void;
  /** The queue overflowed or a message could not be drawn: ask the server for a keyframe. */
  onLost?: () => void;
}

/**
 * Draws frames and updates on a canvas, one at a time and in order (an update builds on the
 * picture the ones before left). Version 1 frames replace each other (the newest wins);
 * version 2 updates queue, and a keyframe drops what it paints over. The canvas must not be
 * drawn on by anyone else.
 */
export class ScreenPainter {
  private queue: Array<Frame | Update> = [];
  private queuedBytes = 0;
  private busy = false;
  private waitKey = false;
  private closed = false;
  private idlers: Array<() => void> = [];
  /** Updates drawn, and whether the last one left the picture exact. */
  drawn = 0;
  lossless = false;

  constructor(
    private readonly canvas: CanvasLike,
    private readonly ctx: Context2D,
    private readonly hooks: PainterHooks = {},
    private readonly decode: Decoder = decodeImage,
  ) {}

  /** Queues a whole frame (version 1). */
  frame(f: Frame) {
    this.queue = this.queue.filter((m) => 'regions' in m);
    this.queue.push(f);
    void this.pump();
  }

  /** Queues an update (version 2). */
  update(u: Update) {
    if (u.key) {
      this.queue = this.queue.filter((m) => !('regions' in m));
      this.queuedBytes = 0;
      this.waitKey = false;
    } else if (this.waitKey) {
      return; // lost the picture: only a keyframe can follow
    }
    this.queue.push(u);
    this.queuedBytes += u.bytes;
    const updates = this.queue.filter((m) => 'regions' in m).length;
    if (updates > maxQueuedUpdates || this.queuedBytes > maxQueuedBytes) {
      this.lose();
      return;
    }
    void this.pump();
  }

  /** Stops drawing. */
  close() {
    this.closed = true;
    this.queue = [];
    this.wake();
  }

  /**
   * Resolves once everything queued so far has been drawn (or dropped): the picture shows
   * every message given before the call (a replay's seek, for one).
   */
  idle(): Promise<void> {
    if (!this.busy && this.queue.length === 0) return Promise.resolve();
    return new Promise((r) => this.idlers.push(r));
  }

  private wake() {
    const w = this.idlers;
    this.idlers = [];
    for (const r of w) r();
  }

  private lose() {
    this.queue = this.queue.filter((m) => !('regions' in m));
    this.queuedBytes = 0;
    this.waitKey = true;
    this.hooks.onLost?.();
  }

  private async pump() {
    if (this.busy) return;
    this.busy = true;
    try {
      while (!this.closed && this.queue.length > 0) {
        const m = this.queue.shift()!;
        if ('regions' in m) {
          this.queuedBytes -= m.bytes;
          try {
            await this.apply(m);
          } catch {
            this.lose(); // an undecodable region: the picture is wrong from here on
          }
        } else {
          await this.whole(m);
        }
      }
    } finally {
      this.busy = false;
      this.wake();
    }
  }

  private resize(width: number, height: number) {
    if (this.canvas.width !== width || this.canvas.height !== height) {
      this.canvas.width = width;
      this.canvas.height = height;
      this.hooks.onSize?.(width, height);
    }
  }

  private async whole(f: Frame) {
    let bmp: ImageBitmap;
    try {
      bmp = await this.decode(f.image, f.mediaType);
    } catch {
      return; // an undecodable frame: the next one replaces it anyway
    }
    if (this.closed) return;
    this.resize(f.width, f.height);
    this.ctx.drawImage(bmp, 0, 0);
    bmp.close();
    this.drawn++;
    this.lossless = f.mediaType === 'image/png';
    this.hooks.onDrawn?.(f.id, this.lossless);
  }

  private async apply(u: Update) {
    // Decode every image of the update at once, then draw all regions in order.
    const images = await Promise.all(
      u.regions.map((r) => (r.enc === 'jpeg' || r.enc === 'png' ? this.decode(r.data, `image/${r.enc}`) : Promise.resolve(null))),
    );
    try {
      if (this.closed) return;
      if (u.key) this.resize(u.width, u.height);
      else if (this.canvas.width !== u.width || this.canvas.height !== u.height) throw new Error('update for another screen size');
      u.regions.forEach((r, i) => this.region(r, images[i]));
    } finally {
      for (const b of images) b?.close();
    }
    this.drawn++;
    this.lossless = u.lossless;
    this.hooks.onDrawn?.(u.id, u.lossless);
  }

  private region(r: Region, img: ImageBitmap | null) {
    switch (r.enc) {
      case 'fill':
        this.ctx.fillStyle = `rgb(${r.data[0]}, ${r.data[1]}, ${r.data[2]})`;
        this.ctx.fillRect(r.x, r.y, r.w, r.h);
        return;
      case 'copy': {
        const dv = new DataView(r.data.buffer, r.data.byteOffset, 4);
        // A canvas drawn onto itself: the browser copies through a snapshot, so overlapping
        // source and destination (a scroll) come out right.
        this.ctx.drawImage(this.canvas as unknown as CanvasImageSource, dv.getUint16(0), dv.getUint16(2), r.w, r.h, r.x, r.y, r.w, r.h);
        return;
      }
      default:
        if (!img) throw new Error('region without an image');
        if (img.width === r.w && img.height === r.h) {
          this.ctx.drawImage(img, r.x, r.y);
        } else if (r.enc === 'jpeg' && img.width <= r.w && img.height <= r.h) {
          // A lower resolution for a link that is behind: stretched over the region.
          this.ctx.drawImage(img, 0, 0, img.width, img.height, r.x, r.y, r.w, r.h);
        } else {
          throw new Error('region image has the wrong size');
        }
    }
  }
}

/**
 * Draws the desktop's pointer on an overlay canvas the size of the screen: its image at its
 * position, minus the hot spot. Only the pointer's own rectangle is cleared and redrawn when
 * it moves.
 */
export class PointerOverlay {
  private image: ImageBitmap | null = null;
  private cursor: CursorMessage | null = null;
  private pos: PointerMessage | null = null;
  private drawnAt: { x: number; y: number; w: number; h: number } | null = null;
  private hidden = false;
  private seq = 0;

  constructor(
    private readonly canvas: CanvasLike,
    private readonly ctx: Context2D,
    private readonly decode: Decoder = decodeImage,
  ) {}

  /** The pointer's image changed. */
  async setCursor(c: CursorMessage) {
    const seq = ++this.seq;
    const bytes = Uint8Array.from(atob(c.png), (ch) => ch.charCodeAt(0));
    let img: ImageBitmap;
    try {
      img = await this.decode(bytes, 'image/png');
    } catch {
      return;
    }
    if (seq !== this.seq) {
      img.close();
      return; // a newer image came meanwhile
    }
    this.image?.close();
    this.image = img;
    this.cursor = c;
    this.draw();
  }

  /** The pointer moved. */
  setPosition(p: PointerMessage) {
    this.pos = p;
    this.draw();
  }

  /** The screen's size (the overlay matches it). */
  setSize(width: number, height: number) {
    if (this.canvas.width !== width || this.canvas.height !== height) {
      this.canvas.width = width;
      this.canvas.height = height;
      this.drawnAt = null;
      this.draw();
    }
  }

  /** Hides the pointer (the person's own cursor shows it) or shows it again. */
  setHidden(hidden: boolean) {
    this.hidden = hidden;
    this.draw();
  }

  /** The cursor image as a CSS cursor value (for the person in control), or '' while none. */
  cssCursor(): string {
    const c = this.cursor;
    if (!c || c.width > 128 || c.height > 128) return '';
    return `url(data:image/png;base64,${c.png}) ${c.hotX} ${c.hotY}, default`;
  }

  /** Where the pointer is drawn now (screen pixels), or null. */
  drawnRect() {
    return this.drawnAt;
  }

  private draw() {
    if (this.drawnAt) {
      const d = this.drawnAt;
      this.ctx.clearRect(d.x, d.y, d.w, d.h);
      this.drawnAt = null;
    }
    if (this.hidden || !this.image || !this.cursor || !this.pos || this.canvas.width === 0) return;
    const x = this.pos.x - this.cursor.hotX;
    const y = this.pos.y - this.cursor.hotY;
    this.ctx.drawImage(this.image, x, y);
    this.drawnAt = { x, y, w: this.image.width, h: this.image.height };
  }
}
