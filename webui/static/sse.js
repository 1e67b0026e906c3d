// Server-sent events from a fetch() response body: the POST streams of /api are not EventSource-able.

/** Splits text chunks into events ({event, data}); an event ends at a blank line. */
export class EventStreamParser {
  constructor() {
    this.buffer = "";
    this.event = null;
    this.data = [];
  }

  /** Feed a decoded chunk; returns the events it completed. */
  push(chunk) {
    this.buffer += chunk;
    const lines = this.buffer.split(/\r\n|\r|\n/);
    this.buffer = lines.pop();  // an unfinished line waits for the next chunk
    const events = [];
    for (const line of lines) {
      if (line === "") {
        if (this.data.length) events.push({ event: this.event, data: this.data.join("\n") });
        this.event = null;
        this.data = [];
      } else if (line.startsWith(":")) {
        continue;  // a comment (keep-alive)
      } else {
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") this.event = value;
        else if (field === "data") this.data.push(value);
      }
    }
    return events;
  }
}

/** Yields the JSON payload of every event of a streaming response. */
export async function* readEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  const parser = new EventStreamParser();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    for (const { data } of parser.push(value)) yield JSON.parse(data);
  }
}
