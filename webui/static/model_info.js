// What the model the engine runs samples with, and what its KV cache holds (GET /health's sampling and kv_cache):
// under the Model list, and in the model chip's tooltip. The KV cache is said in the server's one wording for every
// UI (its summary: tokens and chats kept, and that memory fills only as they are used), never as a bare size.
import { h } from "./dom.js";

/** "temperature 0.2, top_p 0.9 — SmolLM2's model card": the values a reply samples with where its chat sets none
 * (those that change nothing left out: top_p 1, top_k 0, min_p 0, no penalty), and where they come from. */
export function samplingWords(sampling) {
  const { temperature, top_p: topP, top_k: topK, min_p: minP } = sampling;
  const values = [`temperature ${temperature}`, topP < 1 && `top_p ${topP}`, topK > 0 && `top_k ${topK}`,
    minP > 0 && `min_p ${minP}`,
    sampling.repetition_penalty !== 1 && `repetition_penalty ${sampling.repetition_penalty}`,
    sampling.presence_penalty && `presence_penalty ${sampling.presence_penalty}`,
    sampling.frequency_penalty && `frequency_penalty ${sampling.frequency_penalty}`];
  return `${values.filter(Boolean).join(", ")} — ${sampling.source}`;
}

/** The model's info as [label, text] lines: `sampling` (SamplingDefaults) and `kvCache` (KVCacheSize), null where the
 * server does not say (a model still loading, a remote engine's cache). */
export function modelInfoLines({ sampling, kvCache }) {
  return [
    sampling && ["Samples at", samplingWords(sampling)],
    sampling && ["Forks sample at", `temperature ${sampling.fork_temperature} at least, so that their replies differ`],
    kvCache && ["KV cache", kvCache.summary],
  ].filter(Boolean);
}

/** The lines under the Model list, in a <details> that opens to them. */
export class ModelInfo {
  constructor(details) {
    this.details = details;
    this.list = details.querySelector("dl");
  }

  show(info) {
    const lines = modelInfoLines(info);
    this.details.hidden = !lines.length;
    this.list.replaceChildren(...lines.flatMap(([label, text]) => [h("dt", { text: label }), h("dd", { text })]));
  }
}
