/*
 * A JSON check that reads its input in pieces and keeps nothing but a few top-level members:
 * a 200 MB terraform state is validated, and its `serial` and `lineage` read, in constant
 * memory. It accepts exactly what JSON.parse accepts (RFC 8259, no BOM), byte by byte.
 */

/** Why the input is refused: not JSON ("syntax"), or a kept member over its size limit. */
export class JsonScanError extends Error {
  constructor(
    readonly kind: "syntax" | "too_long",
    message: string,
  ) {
    super(message);
  }
}

/** What a complete scan found. */
export interface JsonScanResult {
  topLevel: "object" | "array" | "string" | "number" | "literal";
  /** Kept top-level members (the last one of a repeated name, as JSON.parse does); objects and arrays are `nonScalar`. */
  fields: Map<string, unknown>;
}

/** The value kept for a top-level member that is an object or array. */
export const nonScalar: unique symbol = Symbol("non-scalar JSON value");

/** Longest top-level member name compared with `keep`; longer ones are never kept. */
const maxKeyBytes = 1024;

const VALUE = 0;
const ARRAY_START = 1;
const OBJECT_START = 2;
const KEY = 3;
const COLON = 4;
const AFTER = 5;
const DONE = 6;
const STRING = 7;
const ESCAPE = 8;
const UNICODE = 9;
const LITERAL = 10;
const NUM_MINUS = 11;
const NUM_ZERO = 12;
const NUM_INT = 13;
const NUM_DOT = 14;
const NUM_FRAC = 15;
const NUM_E = 16;
const NUM_E_SIGN = 17;
const NUM_EXP = 18;

const OPEN_OBJECT = 0x7b;
const OPEN_ARRAY = 0x5b;

const isSpace = (b: number) => b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;
const isDigit = (b: number) => b >= 0x30 && b <= 0x39;
const isHex = (b: number) => isDigit(b) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66);
const numberEnds = new Set([NUM_ZERO, NUM_INT, NUM_FRAC, NUM_EXP]);

/** Feed it with `push`, then call `end`; `result` describes a valid document. */
export class JsonScanner {
  private readonly keep: ReadonlySet<string>;
  private readonly maxKeptBytes: number;
  private state = VALUE;
  private readonly stack: number[] = [];
  private offset = 0;
  private topLevel: JsonScanResult["topLevel"] | undefined;
  private readonly fields = new Map<string, unknown>();
  private stringIsKey = false;
  private hexLeft = 0;
  private literal = "";
  private literalAt = 0;
  /** Bytes of the depth-1 member name being read; null when not at depth 1 or too long. */
  private keyBytes: number[] | null = null;
  private currentKey: string | null = null;
  /** Bytes of a kept scalar being read. */
  private kept: number[] | null = null;

  constructor(options: { keep: readonly string[]; maxKeptBytes: number }) {
    this.keep = new Set(options.keep);
    this.maxKeptBytes = options.maxKeptBytes;
  }

  push(chunk: Uint8Array): void {
    const n = chunk.length;
    let i = 0;
    while (i < n) {
      if (this.state === STRING && this.kept === null && this.keyBytes === null) {
        // The bulk of a large state is string contents nobody keeps: skip them in a tight loop.
        let j = i;
        for (; j < n; j++) {
          const c = chunk[j] as number;
          if (c === 0x22 || c === 0x5c || c < 0x20) break;
        }
        this.offset += j - i;
        i = j;
        if (i === n) return;
      }
      const b = chunk[i] as number;
      while (this.step(b));
      this.offset += 1;
      i += 1;
    }
  }

  end(): void {
    if (numberEnds.has(this.state)) this.finishScalar();
    if (this.state !== DONE)
      throw new JsonScanError(
        "syntax",
        this.offset === 0 ? "the body is empty" : `unexpected end of JSON input at byte ${this.offset}`,
      );
  }

  result(): JsonScanResult {
    if (this.state !== DONE || this.topLevel === undefined)
      throw new Error("JsonScanner.result() before a successful end()");
    return { topLevel: this.topLevel, fields: this.fields };
  }

  private fail(b: number): never {
    const shown =
      b >= 0x20 && b < 0x7f ? JSON.stringify(String.fromCharCode(b)) : `byte 0x${b.toString(16).padStart(2, "0")}`;
    throw new JsonScanError("syntax", `unexpected ${shown} at byte ${this.offset}`);
  }

  private capture(b: number): void {
    if (this.kept) {
      if (this.kept.length >= this.maxKeptBytes)
        throw new JsonScanError(
          "too_long",
          `top-level ${JSON.stringify(this.currentKey)} is longer than ${this.maxKeptBytes} bytes`,
        );
      this.kept.push(b);
    } else if (this.keyBytes) {
      if (this.keyBytes.length >= maxKeyBytes) this.keyBytes = null;
      else this.keyBytes.push(b);
    }
  }

  /** Handles one byte; true when the byte must be handled again in the new state. */
  private step(b: number): boolean {
    switch (this.state) {
      case STRING:
        if (b === 0x22) {
          this.capture(b);
          this.finishString();
        } else if (b === 0x5c) {
          this.capture(b);
          this.state = ESCAPE;
        } else if (b < 0x20) this.fail(b);
        else this.capture(b);
        return false;
      case ESCAPE:
        if (b === 0x75) {
          this.hexLeft = 4;
          this.state = UNICODE;
        } else if (
          b === 0x22 ||
          b === 0x5c ||
          b === 0x2f ||
          b === 0x62 ||
          b === 0x66 ||
          b === 0x6e ||
          b === 0x72 ||
          b === 0x74
        )
          this.state = STRING;
        else this.fail(b);
        this.capture(b);
        return false;
      case UNICODE:
        if (!isHex(b)) this.fail(b);
        this.capture(b);
        if (--this.hexLeft === 0) this.state = STRING;
        return false;
      case LITERAL:
        if (b !== this.literal.charCodeAt(this.literalAt)) this.fail(b);
        this.capture(b);
        if (++this.literalAt === this.literal.length) this.finishScalar();
        return false;
      case NUM_MINUS:
        if (b === 0x30) this.state = NUM_ZERO;
        else if (isDigit(b)) this.state = NUM_INT;
        else this.fail(b);
        this.capture(b);
        return false;
      case NUM_ZERO:
      case NUM_INT:
        if (this.state === NUM_INT && isDigit(b)) this.capture(b);
        else if (b === 0x2e) {
          this.capture(b);
          this.state = NUM_DOT;
        } else if (b === 0x65 || b === 0x45) {
          this.capture(b);
          this.state = NUM_E;
        } else return this.endNumber(b);
        return false;
      case NUM_DOT:
        if (!isDigit(b)) this.fail(b);
        this.capture(b);
        this.state = NUM_FRAC;
        return false;
      case NUM_FRAC:
        if (isDigit(b)) this.capture(b);
        else if (b === 0x65 || b === 0x45) {
          this.capture(b);
          this.state = NUM_E;
        } else return this.endNumber(b);
        return false;
      case NUM_E:
        if (b === 0x2b || b === 0x2d) this.state = NUM_E_SIGN;
        else if (isDigit(b)) this.state = NUM_EXP;
        else this.fail(b);
        this.capture(b);
        return false;
      case NUM_E_SIGN:
        if (!isDigit(b)) this.fail(b);
        this.capture(b);
        this.state = NUM_EXP;
        return false;
      case NUM_EXP:
        if (isDigit(b)) {
          this.capture(b);
          return false;
        }
        return this.endNumber(b);
    }
    if (isSpace(b)) return false;
    switch (this.state) {
      case ARRAY_START:
        if (b === 0x5d) {
          this.stack.pop();
          this.afterValue();
          return false;
        }
        this.state = VALUE;
        return true;
      case VALUE:
        this.startValue(b);
        return false;
      case OBJECT_START:
      case KEY:
        if (b === 0x7d && this.state === OBJECT_START) {
          this.stack.pop();
          this.afterValue();
        } else if (b === 0x22) {
          this.stringIsKey = true;
          this.keyBytes = this.stack.length === 1 ? [b] : null;
          this.state = STRING;
        } else this.fail(b);
        return false;
      case COLON:
        if (b !== 0x3a) this.fail(b);
        this.state = VALUE;
        return false;
      case AFTER: {
        const top = this.stack[this.stack.length - 1];
        if (b === 0x2c) this.state = top === OPEN_OBJECT ? KEY : VALUE;
        else if ((b === 0x7d && top === OPEN_OBJECT) || (b === 0x5d && top === OPEN_ARRAY)) {
          this.stack.pop();
          this.afterValue();
        } else this.fail(b);
        return false;
      }
      default:
        // DONE: only whitespace may follow the document.
        return this.fail(b);
    }
  }

  private startValue(b: number): void {
    const keptMember =
      this.stack.length === 1 &&
      this.stack[0] === OPEN_OBJECT &&
      this.currentKey !== null &&
      this.keep.has(this.currentKey);
    const atTop = this.stack.length === 0;
    if (b === OPEN_OBJECT || b === OPEN_ARRAY) {
      if (keptMember) this.fields.set(this.currentKey as string, nonScalar);
      if (atTop) this.topLevel = b === OPEN_OBJECT ? "object" : "array";
      this.stack.push(b);
      this.state = b === OPEN_OBJECT ? OBJECT_START : ARRAY_START;
      return;
    }
    if (b === 0x22) {
      this.stringIsKey = false;
      this.state = STRING;
      if (atTop) this.topLevel = "string";
    } else if (b === 0x2d || isDigit(b)) {
      this.state = b === 0x2d ? NUM_MINUS : b === 0x30 ? NUM_ZERO : NUM_INT;
      if (atTop) this.topLevel = "number";
    } else if (b === 0x74 || b === 0x66 || b === 0x6e) {
      this.literal = b === 0x74 ? "true" : b === 0x66 ? "false" : "null";
      this.literalAt = 1;
      this.state = LITERAL;
      if (atTop) this.topLevel = "literal";
    } else this.fail(b);
    this.kept = keptMember ? [b] : null;
  }

  private finishString(): void {
    if (!this.stringIsKey) {
      this.finishScalar();
      return;
    }
    if (this.stack.length === 1) {
      this.currentKey = this.keyBytes ? (JSON.parse(Buffer.from(this.keyBytes).toString("utf8")) as string) : null;
      this.keyBytes = null;
    }
    this.state = COLON;
  }

  private endNumber(b: number): boolean {
    this.finishScalar();
    return this.state === DONE ? !isSpace(b) && this.fail(b) : true;
  }

  private finishScalar(): void {
    if (this.kept) {
      this.fields.set(this.currentKey as string, JSON.parse(Buffer.from(this.kept).toString("utf8")));
      this.kept = null;
    }
    this.afterValue();
  }

  private afterValue(): void {
    this.state = this.stack.length === 0 ? DONE : AFTER;
  }
}
