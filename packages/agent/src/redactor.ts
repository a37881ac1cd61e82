import { redactText } from "@drover/protocol";
import { StringDecoder } from "node:string_decoder";

/**
 * Redacts secret values from a byte stream before it leaves the agent. A secret may be split
 * across two chunks, so the last (longest secret − 1) characters are held back until more
 * output arrives or the stream ends.
 */
export class StreamRedactor {
  private readonly decoder = new StringDecoder("utf8");
  private held = "";
  private secrets: string[] = [];
  private holdBack = 0;

  /** Sets the values to hide; empty values are ignored. */
  setSecrets(values: readonly string[]): void {
    this.secrets = values.filter((v) => v.length > 0);
    this.holdBack = Math.max(0, ...this.secrets.map((s) => s.length - 1));
  }

  /** Takes raw output; returns what may be sent now. */
  push(chunk: Buffer): string {
    const text = this.held + this.decoder.write(chunk);
    const redacted = redactText(text, this.secrets);
    if (this.holdBack === 0) {
      this.held = "";
      return redacted;
    }
    // Hold back only a tail that could still become a secret; redaction never produces one.
    const cut = Math.max(0, redacted.length - this.holdBack);
    this.held = redacted.slice(cut);
    return redacted.slice(0, cut);
  }

  /** Everything still held, at the end of the stream. */
  end(): string {
    const rest = redactText(this.held + this.decoder.end(), this.secrets);
    this.held = "";
    return rest;
  }
}
