/**
 * The om API's types, generated from the server's OpenAPI document by openapi-typescript.
 * Do not edit: regenerate with `npm run generate` in clients/typescript (see its README).
 */

export interface paths {
    "/v1/threads/{thread_id}/turns": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Store a turn's messages and get the context for the next model call */
        post: operations["post_turn_v1_threads__thread_id__turns_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/threads/{thread_id}/status": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The thread's data-om-status payload */
        get: operations["get_status_v1_threads__thread_id__status_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/threads/{thread_id}/observations": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Active observation log, buffered chunks, buffered reflection and past generations */
        get: operations["get_observations_v1_threads__thread_id__observations_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/threads/{thread_id}/messages": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Stored messages, newest page first; page back with cursor (limit, cursor → items, next_cursor) */
        get: operations["get_messages_v1_threads__thread_id__messages_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/threads/{thread_id}/observe": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Observe the unobserved messages now (the manual observe API) */
        post: operations["post_observe_v1_threads__thread_id__observe_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/threads/{thread_id}/reflect": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Reflect the observation log now, optionally with guidance (the manual reflect API) */
        post: operations["post_reflect_v1_threads__thread_id__reflect_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/threads/{thread_id}/config": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The thread's config overrides and the effective config */
        get: operations["get_config_v1_threads__thread_id__config_get"];
        /** Replace the thread's config overrides (validated by the config model) */
        put: operations["put_config_v1_threads__thread_id__config_put"];
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/threads/{thread_id}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The thread: title, metadata, resource, times, and counts of its messages and memory */
        get: operations["get_thread_v1_threads__thread_id__get"];
        put?: never;
        post?: never;
        /** Erase the thread and everything of it: messages, observations, chunks, groups, search entries, events */
        delete: operations["delete_thread_v1_threads__thread_id__delete"];
        options?: never;
        head?: never;
        /** Set the thread's title and/or metadata (a field left out is kept, null clears it) */
        patch: operations["patch_thread_v1_threads__thread_id__patch"];
        trace?: never;
    };
    "/v1/threads/{thread_id}/recall": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Answer a recall tool call: raw messages, the user's threads, or search results */
        post: operations["post_recall_v1_threads__thread_id__recall_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/threads/{thread_id}/events": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The thread's data-om-* events: replay after Last-Event-ID, then live */
        get: operations["get_events_v1_threads__thread_id__events_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/resources": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The caller's resources by id, one page at a time (limit, cursor → items, next_cursor), each with its threads, messages, last activity and OM's cost; `q` keeps those whose id contains it */
        get: operations["list_resources_v1_resources_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/resources/{resource_id}/threads": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The resource's threads, oldest first, one page at a time (limit, cursor → items, next_cursor) */
        get: operations["get_threads_v1_resources__resource_id__threads_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/resources/{resource_id}/config": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The resource's config overrides (merged under each thread's own) and its effective config */
        get: operations["get_resource_config_v1_resources__resource_id__config_get"];
        /** Replace the resource's config overrides (validated; applies to all its threads) */
        put: operations["put_resource_config_v1_resources__resource_id__config_put"];
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/resources/{resource_id}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        post?: never;
        /** Erase the resource and everything of it (a data-subject request): its threads, messages, observations, chunks, groups, search entries, events, shared log and config */
        delete: operations["delete_resource_v1_resources__resource_id__delete"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/resources/{resource_id}/search": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Search the resource's messages and observation groups (retrieval on) */
        post: operations["search_resource_v1_resources__resource_id__search_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/threads/{thread_id}/search": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Search one thread's messages and observation groups (retrieval on) */
        post: operations["search_thread_v1_threads__thread_id__search_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/threads": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The caller's threads, one page at a time (limit, cursor → items, next_cursor); by id, or a resource's oldest first; `q` keeps those whose id or title contains it */
        get: operations["list_threads_v1_threads_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/threads/{thread_id}/observations/{line}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        post?: never;
        /** Forget one line of the active observation log: removed from the log, its past generations, chunks, groups and events (a new generation; data-om-observation-edit) */
        delete: operations["delete_observation_line_v1_threads__thread_id__observations__line__delete"];
        options?: never;
        head?: never;
        /** Correct one line of the active observation log (a new generation; data-om-observation-edit) */
        patch: operations["patch_observation_line_v1_threads__thread_id__observations__line__patch"];
        trace?: never;
    };
    "/v1/threads/{thread_id}/working-memory": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The working memory the thread's turns see (its resource's in resource scope) */
        get: operations["get_thread_memory_v1_threads__thread_id__working_memory_get"];
        /** Replace the thread's working memory (409 when expected_version is not the stored version) */
        put: operations["put_thread_memory_v1_threads__thread_id__working_memory_put"];
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/resources/{resource_id}/working-memory": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The resource's working memory (when its config keeps working memory per resource) */
        get: operations["get_resource_memory_v1_resources__resource_id__working_memory_get"];
        /** Replace the resource's working memory (409 when expected_version is not the stored version) */
        put: operations["put_resource_memory_v1_resources__resource_id__working_memory_put"];
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/models": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The actor models the proxy may call (OpenAI's model list) */
        get: operations["list_models_v1_models_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/chat/completions": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** OpenAI-compatible chat completions with memory */
        post: operations["chat_completions_v1_chat_completions_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/usage": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The calling API key's actor-model usage, and its tenant's memory-model budget today */
        get: operations["get_usage_v1_usage_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/usage/spend": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Memory-model tokens and cost per day, for the tenant or one thread, with today's budget state */
        get: operations["get_spend_v1_usage_spend_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/webhooks": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The caller's webhooks */
        get: operations["list_webhooks_v1_webhooks_get"];
        put?: never;
        /** Register a webhook endpoint; the answer holds its signing secret, shown only this once */
        post: operations["create_webhook_v1_webhooks_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/webhooks/{endpoint_id}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** One webhook */
        get: operations["get_webhook_v1_webhooks__endpoint_id__get"];
        put?: never;
        post?: never;
        /** Remove a webhook and its attempts */
        delete: operations["delete_webhook_v1_webhooks__endpoint_id__delete"];
        options?: never;
        head?: never;
        /** Change a webhook's url, events, description or enabled (enabled: true revives a dead one) */
        patch: operations["patch_webhook_v1_webhooks__endpoint_id__patch"];
        trace?: never;
    };
    "/v1/webhooks/{endpoint_id}/rotate-secret": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Replace the signing secret; the previous one keeps signing (both signatures sent) for a while */
        post: operations["rotate_secret_v1_webhooks__endpoint_id__rotate_secret_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/webhooks/{endpoint_id}/previous-secret": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        post?: never;
        /** End a rotation now: only the current secret signs deliveries from here on */
        delete: operations["drop_previous_secret_v1_webhooks__endpoint_id__previous_secret_delete"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/webhooks/{endpoint_id}/deliveries": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** A webhook's delivery state and its last attempts, newest first */
        get: operations["list_deliveries_v1_webhooks__endpoint_id__deliveries_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/threads/{thread_id}/export": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Export a thread: its messages, observation log generations, groups and working memory, as JSON Lines (docs/guide/export-import.md) */
        get: operations["export_thread_v1_threads__thread_id__export_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/resources/{resource_id}/export": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Export a resource: its shared log and working memory, then every thread of it, as JSON Lines */
        get: operations["export_resource_v1_resources__resource_id__export_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/import": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Import a file of JSON Lines (an export) into the caller's memory; idempotent by message id */
        post: operations["import_file_v1_import_post"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/whoami": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Who the caller is: whether keys are required, its tenant, where Flower is */
        get: operations["whoami_v1_whoami_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/fleet": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Queue depths, workers seen, the caller's recent failures and usage, the Flower link */
        get: operations["fleet_v1_fleet_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/threads/{thread_id}/generations/{generation}/diff": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** What the reflection that made a generation changed: its log against the previous generation's, line by line (kept / added / removed) */
        get: operations["generation_diff_v1_threads__thread_id__generations__generation__diff_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/healthz": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The process is up */
        get: operations["healthz_healthz_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/readyz": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The database (schema up to date) and, in celery mode, the broker are reachable */
        get: operations["readyz_readyz_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/metrics": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Prometheus metrics, for a scraper holding the operator's scrape token */
        get: operations["metrics_metrics_get"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
}
export type webhooks = Record<string, never>;
export interface components {
    schemas: {
        /** ActiveLog */
        ActiveLog: {
            /** Record Id */
            record_id: string;
            /** Generation Count */
            generation_count: number;
            /** Observations */
            observations: string;
            /** Observation Tokens */
            observation_tokens: number;
            /** Last Observed At */
            last_observed_at: string | null;
            /** Observed Through Seq */
            observed_through_seq: number;
            /** Total Tokens Observed */
            total_tokens_observed: number;
        };
        /** ActiveWindows */
        ActiveWindows: {
            messages: components["schemas"]["TokenWindow"];
            observations: components["schemas"]["TokenWindow"];
        };
        /** BufferedChunk */
        BufferedChunk: {
            /** Cycle Id */
            cycle_id: string;
            /** Observations */
            observations: string;
            /** Observation Tokens */
            observation_tokens: number;
            /** Message Tokens */
            message_tokens: number;
            /** Message Ids */
            message_ids: string[];
            /** From Seq */
            from_seq: number;
            /** To Seq */
            to_seq: number;
            /**
             * Created At
             * Format: date-time
             */
            created_at: string;
            /** Last Observed At */
            last_observed_at: string | null;
        };
        /** BufferedObservationsStatus */
        BufferedObservationsStatus: {
            /** Chunks */
            chunks: number;
            /** Messagetokens */
            messageTokens: number;
            /** Projectedmessageremoval */
            projectedMessageRemoval: number;
            /** Observationtokens */
            observationTokens: number;
            /**
             * Status
             * @enum {string}
             */
            status: "idle" | "running" | "complete";
        };
        /** BufferedReflection */
        BufferedReflection: {
            /** Observations */
            observations: string;
            /** Observation Tokens */
            observation_tokens: number;
            /** Input Observation Tokens */
            input_observation_tokens: number;
            /** Reflected Line Count */
            reflected_line_count: number;
            /** Cycle Id */
            cycle_id: string | null;
        };
        /** BufferedReflectionStatus */
        BufferedReflectionStatus: {
            /** Inputobservationtokens */
            inputObservationTokens: number;
            /** Observationtokens */
            observationTokens: number;
            /**
             * Status
             * @enum {string}
             */
            status: "idle" | "running" | "complete";
        };
        /** BufferedWindows */
        BufferedWindows: {
            observations: components["schemas"]["BufferedObservationsStatus"];
            reflection: components["schemas"]["BufferedReflectionStatus"];
        };
        /**
         * ChatCompletionRequest
         * @description A standard chat-completions request; OM reads `metadata.thread_id` / `metadata.resource_id` (or the
         *     `X-OM-Thread-Id` / `X-OM-Resource-Id` headers). Extra fields are accepted here only to be checked
         *     against the proxy's allow-list (`om_api.proxy.params.FORWARDED_FIELDS`): one not on it is a 422.
         */
        ChatCompletionRequest: {
            /** Model */
            model: string;
            /** Messages */
            messages: components["schemas"]["ChatMessage"][];
            /**
             * Stream
             * @default false
             */
            stream: boolean;
            /** Metadata */
            metadata?: {
                [key: string]: unknown;
            } | null;
            /** User */
            user?: string | null;
        } & {
            [key: string]: unknown;
        };
        /**
         * ChatCompletionResponse
         * @description A standard chat-completions response (OpenAI shape).
         */
        ChatCompletionResponse: {
            /** Id */
            id: string;
            /**
             * Object
             * @default chat.completion
             */
            object: string;
            /** Created */
            created: number;
            /** Model */
            model: string;
            /** Choices */
            choices: {
                [key: string]: unknown;
            }[];
            /** Usage */
            usage?: {
                [key: string]: unknown;
            } | null;
        } & {
            [key: string]: unknown;
        };
        /**
         * ChatMessage
         * @description A chat-completions message; fields beyond these are passed through to the model unchanged.
         */
        ChatMessage: {
            /**
             * Role
             * @enum {string}
             */
            role: "system" | "developer" | "user" | "assistant" | "tool" | "function";
            /** Content */
            content?: string | {
                [key: string]: unknown;
            }[] | null;
            /** Name */
            name?: string | null;
            /** Tool Calls */
            tool_calls?: {
                [key: string]: unknown;
            }[] | null;
            /** Tool Call Id */
            tool_call_id?: string | null;
        } & {
            [key: string]: unknown;
        };
        /** CheckResult */
        CheckResult: {
            /** Ok */
            ok: boolean;
            /** Detail */
            detail?: string | null;
        };
        /** ConfigRequest */
        ConfigRequest: {
            /**
             * Overrides
             * @description OM options for this thread (camelCase, as in the config); null clears
             */
            overrides?: {
                enabled?: boolean | null;
                model?: unknown | null;
                scope?: ("thread" | "resource") | null;
                activateAfterIdle?: (number | string | boolean | null) | null;
                activateOnProviderChange?: boolean | null;
                shareTokenBudget?: boolean | null;
                temporalMarkers?: boolean | null;
                retrieval?: (boolean | {
                    vector?: boolean | null;
                    scope?: ("thread" | "resource") | null;
                    instructions?: (string | null) | null;
                }) | null;
                obscureThreadIds?: (boolean | null) | null;
                observation?: {
                    model?: unknown | null;
                    instruction?: (string | null) | null;
                    threadTitle?: boolean | null;
                    extract?: {
                        [key: string]: unknown;
                    }[] | null;
                    manageWorkingMemory?: boolean | null;
                    observeAttachments?: (boolean | "auto" | string[]) | null;
                    messageTokens?: number | null;
                    maxTokensPerBatch?: number | null;
                    modelSettings?: {
                        temperature?: ((number) | null) | null;
                        maxOutputTokens?: (number | null) | null;
                    } | null;
                    providerOptions?: ({
                        [key: string]: unknown;
                    } | null) | null;
                    bufferTokens?: (number | false | null) | null;
                    bufferOnIdle?: boolean | null;
                    bufferActivation?: (number | null) | null;
                    activateAfterIdle?: (number | string | boolean | null) | null;
                    activateOnProviderChange?: (boolean | null) | null;
                    blockAfter?: (number | null) | null;
                    previousObserverTokens?: (number | boolean) | null;
                } | null;
                reflection?: {
                    model?: unknown | null;
                    instruction?: (string | null) | null;
                    extract?: {
                        [key: string]: unknown;
                    }[] | null;
                    observationTokens?: number | null;
                    modelSettings?: {
                        temperature?: ((number) | null) | null;
                        maxOutputTokens?: (number | null) | null;
                    } | null;
                    providerOptions?: ({
                        [key: string]: unknown;
                    } | null) | null;
                    bufferActivation?: (number | null) | null;
                    activateAfterIdle?: (number | string | boolean | null) | null;
                    activateOnProviderChange?: boolean | null;
                    blockAfter?: (number | null) | null;
                } | null;
                workingMemory?: {
                    enabled?: boolean | null;
                    scope?: ("thread" | "resource") | null;
                    template?: (string | null) | null;
                    schema?: ({
                        [key: string]: unknown;
                    } | null) | null;
                    agentManaged?: (boolean | null) | null;
                    useStateSignals?: (boolean | null) | null;
                } | null;
            } | null;
            /**
             * Resource Id
             * @description Create the thread under this resource if it does not exist yet
             */
            resource_id?: string | null;
        };
        /** ConfigResponse */
        ConfigResponse: {
            /** Thread Id */
            thread_id: string;
            /** Overrides */
            overrides: {
                [key: string]: unknown;
            } | null;
            /**
             * Resource Overrides
             * @description The overrides of the thread's resource, which the thread's own are merged over
             */
            resource_overrides?: {
                [key: string]: unknown;
            } | null;
            /**
             * Effective
             * @description The service config with the resource's overrides, then the thread's, applied
             */
            effective: {
                [key: string]: unknown;
            };
            /**
             * Warnings
             * @description Options of the effective config that are accepted but have no effect, each with why (e.g. observation.bufferOnIdle while async buffering is off)
             */
            warnings?: string[];
            /**
             * Models
             * @description The models the effective config resolves to, `observer` and `reflector` (a model, a fallback list, or `{"upTo": {...}}` tiers; the default model when none is set)
             */
            models?: {
                [key: string]: unknown;
            };
        };
        /**
         * DaySpend
         * @description OM's model usage on one UTC day.
         */
        DaySpend: {
            /**
             * Day
             * @description The UTC day, YYYY-MM-DD
             */
            day: string;
            /** Input Tokens */
            input_tokens: number;
            /** Output Tokens */
            output_tokens: number;
            /** Total Tokens */
            total_tokens: number;
            /**
             * Cost Usd
             * @description litellm's cost of those calls; 0 for models it has no price for
             */
            cost_usd: number;
            /** Cycles */
            cycles: number;
        };
        /** DiffLineOut */
        DiffLineOut: {
            /**
             * Op
             * @enum {string}
             */
            op: "kept" | "added" | "removed";
            /** Text */
            text: string;
        };
        /** ErrorDetail */
        ErrorDetail: {
            /** Code */
            code: string;
            /** Message */
            message: string;
            /** Field */
            field?: string | null;
            /** Limit */
            limit?: number | null;
            /** Errors */
            errors?: components["schemas"]["FieldError"][] | null;
            /**
             * Request Id
             * @description The request's id, as in its X-Request-ID header: quote it to the operator
             */
            request_id?: string | null;
        };
        /** ErrorResponse */
        ErrorResponse: {
            error: components["schemas"]["ErrorDetail"];
        };
        /** FieldError */
        FieldError: {
            /** Field */
            field: string;
            /** Message */
            message: string;
        };
        /**
         * FleetResponse
         * @description The background machinery as the caller may see it. Queue depths and workers are the operator's
         *     facts, the same for every tenant; failures and usage are the caller's own.
         */
        FleetResponse: {
            /**
             * Executor
             * @description celery: workers run background work; inline: the API process does
             * @enum {string}
             */
            executor: "celery" | "inline";
            /**
             * Queues
             * @description Every queue's depth (empty inline: there is no broker)
             */
            queues: components["schemas"]["QueueDepth"][];
            /**
             * Workers
             * @description Workers that answered within about a second (empty inline)
             */
            workers: components["schemas"]["WorkerSeen"][];
            /**
             * Recent Failures
             * @description The caller's last 20 failed cycles, newest first
             */
            recent_failures: components["schemas"]["RecentFailure"][];
            /** @description The calling key's actor-model usage (as GET /v1/usage); null without keys */
            usage: components["schemas"]["KeyUsageResponse"] | null;
            /** @description OM's own model usage and cost (Observer, Reflector) of the caller's tenant */
            om_usage: components["schemas"]["OMUsage"];
            /**
             * Flower Url
             * @description Where the operator's Flower is (OM_FLOWER_URL); null: none
             */
            flower_url: string | null;
        };
        /** Generation */
        Generation: {
            /** Record Id */
            record_id: string;
            /** Generation Count */
            generation_count: number;
            /**
             * Created At
             * Format: date-time
             */
            created_at: string;
            /**
             * Retired At
             * Format: date-time
             */
            retired_at: string;
            /** Observations */
            observations: string;
            /** Observation Tokens */
            observation_tokens: number;
        };
        /**
         * GenerationDiffResponse
         * @description What the reflection (or line edit) that made a generation changed: its log against the previous
         *     generation's, line by line. Lines appended to the generation after its reflection show as added too.
         */
        GenerationDiffResponse: {
            /** Generation */
            generation: number;
            /**
             * Previous Generation
             * @description The generation compared against; null: the first
             */
            previous_generation: number | null;
            /** Lines */
            lines: components["schemas"]["DiffLineOut"][];
        };
        /** HealthResponse */
        HealthResponse: {
            /**
             * Status
             * @constant
             */
            status: "ok";
        };
        /**
         * ImportResponse
         * @description What an import wrote (`messages`, ...) and what it found already stored (`*_skipped`).
         */
        ImportResponse: {
            /**
             * Lines
             * @description Lines read (the header included)
             */
            lines: number;
            /** Resources */
            resources: number;
            /**
             * Threads
             * @description Threads created by this import
             */
            threads: number;
            /**
             * Threads Existing
             * @description Threads that existed: only their new messages were added
             */
            threads_existing: number;
            /** Messages */
            messages: number;
            /**
             * Messages Skipped
             * @description Messages already stored (same id in the same thread)
             */
            messages_skipped: number;
            /**
             * Records
             * @description Observation log generations written
             */
            records: number;
            /** Records Skipped */
            records_skipped: number;
            /** Groups */
            groups: number;
            /** Groups Skipped */
            groups_skipped: number;
            /** Working Memory */
            working_memory: number;
            /** Working Memory Skipped */
            working_memory_skipped: number;
            /**
             * Source
             * @description `om`, or `mastra` for a file read from the original's storage
             */
            source: string;
        };
        /**
         * KeyUsageResponse
         * @description What the calling API key spent on actor models through `/v1/chat/completions`, and its tenant's
         *     memory-model budget.
         */
        KeyUsageResponse: {
            /**
             * Key Id
             * @description The key's public id (`omk_...`)
             */
            key_id: string;
            /** Tenant Id */
            tenant_id: string;
            /**
             * Calls
             * @description Actor-model calls that returned an answer (streamed ones once complete)
             */
            calls: number;
            /** Prompt Tokens */
            prompt_tokens: number;
            /** Completion Tokens */
            completion_tokens: number;
            /**
             * Cost Usd
             * @description litellm's cost of those calls; 0 for models it has no price for
             */
            cost_usd: number;
            /** @description The tenant's memory-model spend today against its budget (null from older servers) */
            memory_budget?: components["schemas"]["MemoryBudget"] | null;
        };
        /**
         * MemoryBudget
         * @description The tenant's spend on memory models (Observer, Reflector, ...) today, against its daily budget.
         */
        MemoryBudget: {
            /**
             * Daily Budget Usd
             * @description The tenant's memory-model budget per UTC day; null: no budget
             */
            daily_budget_usd: number | null;
            /**
             * Spent Today Usd
             * @description OM's model cost for the tenant's threads since the last UTC midnight
             */
            spent_today_usd: number;
            /**
             * Paused
             * @description Observation is paused (turns go on uncompressed) because the budget is spent
             */
            paused: boolean;
            /**
             * Day
             * @description The UTC day counted, YYYY-MM-DD
             */
            day: string;
            /**
             * Resets At
             * Format: date-time
             * @description The next UTC midnight, when the day's spend starts from 0
             */
            resets_at: string;
        };
        /**
         * MessagesResponse
         * @description `items` newest page first, each page in conversation order. `messages` and `next_before_seq` are
         *     the same page in the names this response had before pagination was unified (kept for older callers).
         */
        MessagesResponse: {
            /** Items */
            items: components["schemas"]["StoredMessage"][];
            /**
             * Next Cursor
             * @description Pass as `cursor` for the next page; null on the last page
             */
            next_cursor?: string | null;
            /** Thread Id */
            thread_id: string;
            /**
             * Messages
             * @description The same as items (kept for older callers)
             */
            messages: components["schemas"]["StoredMessage"][];
            /**
             * Next Before Seq
             * @description Pass as before_seq for the previous (older) page
             */
            next_before_seq: number | null;
        };
        /**
         * ModelCard
         * @description One actor model the proxy may call (`GET /v1/models`), in OpenAI's shape.
         */
        ModelCard: {
            /**
             * Id
             * @description The model name to send as `model` (`provider/model`)
             */
            id: string;
            /**
             * Object
             * @default model
             * @constant
             */
            object: "model";
            /**
             * Created
             * @description Unix time; om does not know when a provider made the model: 0
             */
            created: number;
            /**
             * Owned By
             * @description The provider part of the name (`openai`, `anthropic`, ...)
             */
            owned_by: string;
        };
        /**
         * ModelList
         * @description `GET /v1/models`: the actor models the operator allows (`OM_ACTOR_MODELS`), in OpenAI's list shape.
         */
        ModelList: {
            /**
             * Object
             * @default list
             * @constant
             */
            object: "list";
            /** Data */
            data: components["schemas"]["ModelCard"][];
        };
        /**
         * OMEvent
         * @description One `data-om-*` part from the thread's outbox; `id` is its outbox id (events are ordered by it).
         *
         *     `cursor` is set on events read from the live stream: pass the last one back as `last_event_id` to
         *     resume after a disconnect without missing or repeating an event.
         */
        OMEvent: {
            /** Id */
            id: number;
            /** Type */
            type: string;
            /** Data */
            data: {
                [key: string]: unknown;
            };
            /** Cursor */
            cursor?: string | null;
        };
        /**
         * OMUsage
         * @description OM's own model calls (Observer, Reflector) for this thread: tokens, litellm's cost, cycles.
         */
        OMUsage: {
            /** Input Tokens */
            input_tokens: number;
            /** Output Tokens */
            output_tokens: number;
            /** Total Tokens */
            total_tokens: number;
            /**
             * Cost Usd
             * @description litellm's cost of those calls; 0 for models it has no price for
             */
            cost_usd: number;
            /**
             * Cycles
             * @description Cycles that reported usage (each end or failed event once)
             */
            cycles: number;
        };
        /** ObservationEditResponse */
        ObservationEditResponse: {
            /** Thread Id */
            thread_id: string;
            /**
             * Action
             * @enum {string}
             */
            action: "update" | "delete";
            /** Line */
            line: number;
            /**
             * Cycle Id
             * @description The cycleId of the data-om-observation-edit event
             */
            cycle_id: string;
            /**
             * Record Id
             * @description The new generation
             */
            record_id: string;
            /** Previous Record Id */
            previous_record_id: string;
            /** Generation Count */
            generation_count: number;
            /** Observation Tokens */
            observation_tokens: number;
            /**
             * Observations
             * @description The new active log (its lines are what the next edit addresses)
             */
            observations: string;
        };
        /** ObservationLineEdit */
        ObservationLineEdit: {
            /**
             * Text
             * @description The line's new text: one line of prose, not blank, not a tag
             */
            text: string;
            /**
             * Expected Sha256
             * @description SHA-256 (hex) of the line's UTF-8 text as you read it: the edit is refused with 409 when the line is no longer that text
             */
            expected_sha256: string;
        };
        /** ObservationsResponse */
        ObservationsResponse: {
            /** Thread Id */
            thread_id: string;
            /** Resource Id */
            resource_id: string;
            active: components["schemas"]["ActiveLog"] | null;
            /** Buffered Chunks */
            buffered_chunks: components["schemas"]["BufferedChunk"][];
            buffered_reflection: components["schemas"]["BufferedReflection"] | null;
            /**
             * Generations
             * @description Retired generations, newest first
             */
            generations: components["schemas"]["Generation"][];
            /** Current Task */
            current_task: string | null;
            /** Suggested Response */
            suggested_response: string | null;
            /** Title */
            title: string | null;
        };
        /** ObserveRequest */
        ObserveRequest: {
            /**
             * Wait
             * @description Wait (up to the blocking deadline) for the observation
             * @default true
             */
            wait: boolean;
        };
        /** OperationResponse */
        OperationResponse: {
            /** Thread Id */
            thread_id: string;
            /**
             * Operation
             * @enum {string}
             */
            operation: "observation" | "reflection";
            /** Cycle Id */
            cycle_id: string;
            /**
             * Completed
             * @description The work finished before the deadline (always false when wait=false)
             */
            completed: boolean;
            /**
             * Applied
             * @description The memory changed (an end event of this operation was written)
             */
            applied: boolean;
            /** Error */
            error?: string | null;
            /** Events */
            events: components["schemas"]["OMEvent"][];
            status: components["schemas"]["StatusPayload"] | null;
        };
        /** Page[ResourceSummary] */
        Page_ResourceSummary_: {
            /** Items */
            items: components["schemas"]["ResourceSummary"][];
            /**
             * Next Cursor
             * @description Pass as `cursor` for the next page; null on the last page
             */
            next_cursor?: string | null;
        };
        /** Page[ThreadInfo] */
        Page_ThreadInfo_: {
            /** Items */
            items: components["schemas"]["ThreadInfo"][];
            /**
             * Next Cursor
             * @description Pass as `cursor` for the next page; null on the last page
             */
            next_cursor?: string | null;
        };
        /** Page[WebhookInfo] */
        Page_WebhookInfo_: {
            /** Items */
            items: components["schemas"]["WebhookInfo"][];
            /**
             * Next Cursor
             * @description Pass as `cursor` for the next page; null on the last page
             */
            next_cursor?: string | null;
        };
        /**
         * Part
         * @description One part of a message.
         *
         *     `type` is one of `text`, `reasoning`, `tool-invocation`, `image`, `file`, `step-start`, or any
         *     `data-*` kind (OM's own markers are `data-om-*`). Fields that do not apply to a kind stay None.
         */
        Part: {
            /** Type */
            type: string | ("text" | "reasoning" | "tool-invocation" | "image" | "file" | "step-start" | "source");
            /** Text */
            text?: string | null;
            /** Toolcallid */
            toolCallId?: string | null;
            /** Toolname */
            toolName?: string | null;
            /** State */
            state?: ("partial-call" | "call" | "approval-requested" | "approval-responded" | "result" | "output-denied" | "output-error") | null;
            /** Args */
            args?: unknown;
            /** Result */
            result?: unknown;
            /** Errortext */
            errorText?: string | null;
            /** Approvalreason */
            approvalReason?: string | null;
            /** Data */
            data?: unknown;
            /** Url */
            url?: string | null;
            /** Mimetype */
            mimeType?: string | null;
            /** Filename */
            filename?: string | null;
            /** Width */
            width?: number | null;
            /** Height */
            height?: number | null;
            /** Detail */
            detail?: string | null;
            /** Model */
            model?: string | null;
            /** Providermetadata */
            providerMetadata?: {
                [key: string]: unknown;
            } | null;
            /** Createdat */
            createdAt?: string | null;
            /** Seq */
            seq?: number | null;
        };
        /** QueueDepth */
        QueueDepth: {
            /**
             * Name
             * @description A Celery queue of the task table (ARCHITECTURE.md, the operations table)
             */
            name: string;
            /**
             * Depth
             * @description Messages waiting in the broker (not those a worker already took)
             */
            depth: number;
        };
        /** ReadinessResponse */
        ReadinessResponse: {
            /**
             * Status
             * @enum {string}
             */
            status: "ready" | "unavailable";
            /** Checks */
            checks: {
                [key: string]: components["schemas"]["CheckResult"];
            };
        };
        /**
         * RecallResponse
         * @description One recall answer (behaviour §9.4); which fields are present depends on the mode. Messages mode:
         *     `messages`, `count`, `cursor`, `page`, `limit`, `detail`, `hasNextPage`, `hasPrevPage` (plus
         *     `truncated` and `tokenOffset` when the token budget cut it). With `partIndex`: `text`, `messageId`,
         *     `partIndex`, `role`, `type`, `truncated` (plus `nextCharOffset`, and `note` when the part was not
         *     there and the next message's first part is shown). Threads: `threads`, `count`, `page`, `hasMore`.
         *     Search: `results`, `count`.
         */
        RecallResponse: {
            /** Messages */
            messages?: string | null;
            /** Threads */
            threads?: string | null;
            /** Results */
            results?: string | null;
            /** Text */
            text?: string | null;
            /** Count */
            count?: number | null;
            /** Cursor */
            cursor?: string | null;
            /** Page */
            page?: number | null;
            /** Limit */
            limit?: number | null;
            /** Detail */
            detail?: ("low" | "high") | null;
            /** Hasnextpage */
            hasNextPage?: boolean | null;
            /** Hasprevpage */
            hasPrevPage?: boolean | null;
            /** Hasmore */
            hasMore?: boolean | null;
            /** Truncated */
            truncated?: boolean | null;
            /** Tokenoffset */
            tokenOffset?: number | null;
            /** Messageid */
            messageId?: string | null;
            /** Partindex */
            partIndex?: number | null;
            /** Role */
            role?: string | null;
            /** Type */
            type?: string | null;
            /** Nextcharoffset */
            nextCharOffset?: number | null;
            /** Note */
            note?: string | null;
        };
        /** RecentFailure */
        RecentFailure: {
            /**
             * Thread Id
             * @description The thread; null for a resource's shared log
             */
            thread_id: string | null;
            /**
             * Type
             * @description The failure event's type (`data-om-buffering-failed`, ...)
             */
            type: string;
            /** Error */
            error: string;
            /**
             * At
             * Format: date-time
             */
            at: string;
        };
        /** ReflectRequest */
        ReflectRequest: {
            /**
             * Prompt
             * @description Extra guidance for the Reflector
             */
            prompt?: string | null;
            /**
             * Wait
             * @description Wait (up to the blocking deadline) for the reflection
             * @default true
             */
            wait: boolean;
        };
        /** ResourceConfigRequest */
        ResourceConfigRequest: {
            /**
             * Overrides
             * @description OM options for every thread of this resource (camelCase, as in the config); a thread's own overrides are merged over them; null clears
             */
            overrides?: {
                enabled?: boolean | null;
                model?: unknown | null;
                scope?: ("thread" | "resource") | null;
                activateAfterIdle?: (number | string | boolean | null) | null;
                activateOnProviderChange?: boolean | null;
                shareTokenBudget?: boolean | null;
                temporalMarkers?: boolean | null;
                retrieval?: (boolean | {
                    vector?: boolean | null;
                    scope?: ("thread" | "resource") | null;
                    instructions?: (string | null) | null;
                }) | null;
                obscureThreadIds?: (boolean | null) | null;
                observation?: {
                    model?: unknown | null;
                    instruction?: (string | null) | null;
                    threadTitle?: boolean | null;
                    extract?: {
                        [key: string]: unknown;
                    }[] | null;
                    manageWorkingMemory?: boolean | null;
                    observeAttachments?: (boolean | "auto" | string[]) | null;
                    messageTokens?: number | null;
                    maxTokensPerBatch?: number | null;
                    modelSettings?: {
                        temperature?: ((number) | null) | null;
                        maxOutputTokens?: (number | null) | null;
                    } | null;
                    providerOptions?: ({
                        [key: string]: unknown;
                    } | null) | null;
                    bufferTokens?: (number | false | null) | null;
                    bufferOnIdle?: boolean | null;
                    bufferActivation?: (number | null) | null;
                    activateAfterIdle?: (number | string | boolean | null) | null;
                    activateOnProviderChange?: (boolean | null) | null;
                    blockAfter?: (number | null) | null;
                    previousObserverTokens?: (number | boolean) | null;
                } | null;
                reflection?: {
                    model?: unknown | null;
                    instruction?: (string | null) | null;
                    extract?: {
                        [key: string]: unknown;
                    }[] | null;
                    observationTokens?: number | null;
                    modelSettings?: {
                        temperature?: ((number) | null) | null;
                        maxOutputTokens?: (number | null) | null;
                    } | null;
                    providerOptions?: ({
                        [key: string]: unknown;
                    } | null) | null;
                    bufferActivation?: (number | null) | null;
                    activateAfterIdle?: (number | string | boolean | null) | null;
                    activateOnProviderChange?: boolean | null;
                    blockAfter?: (number | null) | null;
                } | null;
                workingMemory?: {
                    enabled?: boolean | null;
                    scope?: ("thread" | "resource") | null;
                    template?: (string | null) | null;
                    schema?: ({
                        [key: string]: unknown;
                    } | null) | null;
                    agentManaged?: (boolean | null) | null;
                    useStateSignals?: (boolean | null) | null;
                } | null;
            } | null;
        };
        /** ResourceConfigResponse */
        ResourceConfigResponse: {
            /** Resource Id */
            resource_id: string;
            /** Overrides */
            overrides: {
                [key: string]: unknown;
            } | null;
            /**
             * Effective
             * @description The service config with the resource's overrides applied (before any thread's own)
             */
            effective: {
                [key: string]: unknown;
            };
        };
        /**
         * ResourceSummary
         * @description A resource with the totals of its threads.
         */
        ResourceSummary: {
            /**
             * Id
             * @description The resource's id
             */
            id: string;
            /** Threads */
            threads: number;
            /**
             * Messages
             * @description Messages stored in all its threads
             */
            messages: number;
            /**
             * Last Activity At
             * @description The newest turn of any of its threads
             */
            last_activity_at: string | null;
            /**
             * Cost Usd
             * @description litellm's cost of OM's own model calls for its threads
             */
            cost_usd: number;
        };
        /**
         * SearchBody
         * @description A search of a resource's raw messages and observation groups, optionally of some of its threads.
         */
        SearchBody: {
            /**
             * Query
             * @description Words, codes or a question
             */
            query: string;
            /**
             * Limit
             * @description Most results (1-50)
             * @default 10
             */
            limit: number;
            /**
             * After
             * @description Only hits written or observed after this time
             */
            after?: string | null;
            /**
             * Before
             * @description Only hits written or observed before this time
             */
            before?: string | null;
            /**
             * Kinds
             * @description Only observation groups, only raw messages, or both (default)
             */
            kinds?: ("group" | "message")[] | null;
            /**
             * Thread Ids
             * @description Only these threads of the resource (ignored threads of other resources simply match nothing)
             */
            thread_ids?: string[] | null;
        };
        /** SearchResponse */
        SearchResponse: {
            /** Resource Id */
            resource_id: string;
            /** Results */
            results: components["schemas"]["SearchResult"][];
            /** Count */
            count: number;
        };
        /** SearchResult */
        SearchResult: {
            /**
             * Kind
             * @description An observation group or one raw message
             * @enum {string}
             */
            kind: "group" | "message";
            /**
             * Id
             * @description The group id, or the message id
             */
            id: string;
            /** Thread Id */
            thread_id: string;
            /** Text */
            text: string;
            /**
             * At
             * Format: date-time
             * @description When the message was written or the group observed
             */
            at: string;
            /**
             * Score
             * @description Reciprocal-rank fusion score; higher is better
             */
            score: number;
            /**
             * Ranges
             * @description A group's raw-message range (`start:end`, comma-separated when merged)
             */
            ranges?: string | null;
            /**
             * Sources
             * @description Which rankers found it
             */
            sources: ("lexical" | "vector")[];
        };
        /**
         * SpendResponse
         * @description The caller's tenant's memory-model spend per day, per thread per day, and its budget today.
         */
        SpendResponse: {
            /**
             * First Day
             * @description The oldest UTC day counted, YYYY-MM-DD
             */
            first_day: string;
            /**
             * Last Day
             * @description Today (UTC), YYYY-MM-DD
             */
            last_day: string;
            /**
             * Thread Id
             * @description The thread asked for; null: the whole tenant
             */
            thread_id: string | null;
            /**
             * Days
             * @description Usage per day with any (the thread's, or the tenant's), oldest first
             */
            days: components["schemas"]["DaySpend"][];
            /**
             * Threads
             * @description Per thread per day, newest day first, costliest thread first (empty for one thread)
             */
            threads: components["schemas"]["ThreadDaySpend"][];
            /**
             * Truncated
             * @description More per-thread rows exist than OM_USAGE_MAX_ROWS allows
             */
            truncated: boolean;
            budget: components["schemas"]["MemoryBudget"];
        };
        /**
         * StatusPayload
         * @description The `data` of a `data-om-status` part (behaviour §10.1).
         */
        StatusPayload: {
            windows: components["schemas"]["StatusWindows"];
            /** Recordid */
            recordId: string;
            /** Threadid */
            threadId: string | null;
            /** Stepnumber */
            stepNumber: number;
            /** Generationcount */
            generationCount: number;
        };
        /** StatusWindows */
        StatusWindows: {
            active: components["schemas"]["ActiveWindows"];
            buffered: components["schemas"]["BufferedWindows"];
        };
        /**
         * StoredMessage
         * @description A stored message; each part carries its storage sequence number `seq`.
         */
        StoredMessage: {
            /** Id */
            id: string;
            /**
             * Role
             * @enum {string}
             */
            role: "user" | "assistant" | "system" | "tool";
            /** Parts */
            parts?: components["schemas"]["StoredPart"][];
            /**
             * Createdat
             * Format: date-time
             */
            createdAt?: string;
            /** Threadid */
            threadId?: string | null;
            /** Resourceid */
            resourceId?: string | null;
            /** Metadata */
            metadata?: {
                [key: string]: unknown;
            };
        };
        StoredPart: unknown;
        /** ThreadCounts */
        ThreadCounts: {
            /** Messages */
            messages: number;
            /**
             * Observed Messages
             * @description Messages every part of which is covered by observations
             */
            observed_messages: number;
            /**
             * Unobserved Messages
             * @description Messages with parts after the cursor (reach the actor raw)
             */
            unobserved_messages: number;
            /**
             * Observation Tokens
             * @description Tokens of the active log the thread reads
             */
            observation_tokens: number;
            /**
             * Generations
             * @description Generations of that log: the live one and the retired ones
             */
            generations: number;
            /** Buffered Chunks */
            buffered_chunks: number;
        };
        /** ThreadDaySpend */
        ThreadDaySpend: {
            /**
             * Day
             * @description The UTC day, YYYY-MM-DD
             */
            day: string;
            /** Input Tokens */
            input_tokens: number;
            /** Output Tokens */
            output_tokens: number;
            /** Total Tokens */
            total_tokens: number;
            /**
             * Cost Usd
             * @description litellm's cost of those calls; 0 for models it has no price for
             */
            cost_usd: number;
            /** Cycles */
            cycles: number;
            /** Thread Id */
            thread_id: string;
        };
        /** ThreadDetail */
        ThreadDetail: {
            /** Thread Id */
            thread_id: string;
            /** Resource Id */
            resource_id: string;
            /** Title */
            title: string | null;
            /**
             * Metadata
             * @description The caller's own thread metadata
             */
            metadata?: {
                [key: string]: unknown;
            };
            /**
             * Created At
             * Format: date-time
             */
            created_at: string;
            /**
             * Updated At
             * Format: date-time
             */
            updated_at: string;
            /** Last Activity At */
            last_activity_at: string | null;
            /** Last Actor Model */
            last_actor_model: string | null;
            /** Config Overrides */
            config_overrides: {
                [key: string]: unknown;
            } | null;
            /**
             * Messages
             * @description Messages stored in the thread
             * @default 0
             */
            messages: number;
            /**
             * Cost Usd
             * @description litellm's cost of OM's own model calls for this thread (not the actor's)
             * @default 0
             */
            cost_usd: number;
            /**
             * Scope
             * @description Whose log the thread reads: its own, or its resource's shared log
             * @enum {string}
             */
            scope: "thread" | "resource";
            counts: components["schemas"]["ThreadCounts"];
            /**
             * Extracted
             * @description Each configured extractor's persisted value by slug (read from its metadataKeyPath; extractors with metadataKeyPath false are not stored and not shown)
             */
            extracted?: {
                [key: string]: unknown;
            };
            /** @description OM's own model usage and cost for this thread (not the actor's) */
            usage: components["schemas"]["OMUsage"];
        };
        /** ThreadInfo */
        ThreadInfo: {
            /** Thread Id */
            thread_id: string;
            /** Resource Id */
            resource_id: string;
            /** Title */
            title: string | null;
            /**
             * Metadata
             * @description The caller's own thread metadata
             */
            metadata?: {
                [key: string]: unknown;
            };
            /**
             * Created At
             * Format: date-time
             */
            created_at: string;
            /**
             * Updated At
             * Format: date-time
             */
            updated_at: string;
            /** Last Activity At */
            last_activity_at: string | null;
            /** Last Actor Model */
            last_actor_model: string | null;
            /** Config Overrides */
            config_overrides: {
                [key: string]: unknown;
            } | null;
            /**
             * Messages
             * @description Messages stored in the thread
             * @default 0
             */
            messages: number;
            /**
             * Cost Usd
             * @description litellm's cost of OM's own model calls for this thread (not the actor's)
             * @default 0
             */
            cost_usd: number;
        };
        /**
         * ThreadPatch
         * @description Fields to change; a field left out is kept, `null` clears it. `metadata` replaces the caller's
         *     metadata as a whole (OM's own values of the thread are never part of it).
         */
        ThreadPatch: {
            /** Title */
            title?: string | null;
            /** Metadata */
            metadata?: {
                [key: string]: unknown;
            } | null;
        };
        /**
         * ThreadSearchBody
         * @description A search of one thread's raw messages and observation groups.
         */
        ThreadSearchBody: {
            /**
             * Query
             * @description Words, codes or a question
             */
            query: string;
            /**
             * Limit
             * @description Most results (1-50)
             * @default 10
             */
            limit: number;
            /**
             * After
             * @description Only hits written or observed after this time
             */
            after?: string | null;
            /**
             * Before
             * @description Only hits written or observed before this time
             */
            before?: string | null;
            /**
             * Kinds
             * @description Only observation groups, only raw messages, or both (default)
             */
            kinds?: ("group" | "message")[] | null;
        };
        /**
         * ThreadsResponse
         * @description A resource's threads, oldest first. `threads` is the same as `items` (kept for older callers).
         */
        ThreadsResponse: {
            /** Items */
            items: components["schemas"]["ThreadInfo"][];
            /**
             * Next Cursor
             * @description Pass as `cursor` for the next page; null on the last page
             */
            next_cursor?: string | null;
            /** Resource Id */
            resource_id: string;
            /**
             * Threads
             * @description The same as items (kept for older callers)
             */
            threads: components["schemas"]["ThreadInfo"][];
        };
        /** TokenWindow */
        TokenWindow: {
            /** Tokens */
            tokens: number;
            /** Threshold */
            threshold: number;
        };
        /** TurnContext */
        TurnContext: {
            /**
             * Form
             * @description The form answered with: `TurnRequest.context`, or the form it defaults to
             * @default full
             * @enum {string}
             */
            form: "full" | "messages" | "openai" | "none";
            /**
             * System Messages
             * @description Memory messages to put before the conversation: stable log first, then hints
             */
            system_messages: string[];
            /**
             * Continuation Reminder
             * @description Goes right before the unobserved messages; may be empty
             */
            continuation_reminder: string;
            /**
             * Messages
             * @description The stored messages not yet covered by observations
             */
            messages: components["schemas"]["StoredMessage"][];
            /**
             * Openai Messages
             * @description All of the above as chat-completions messages, ready to send to the actor model
             */
            openai_messages: {
                [key: string]: unknown;
            }[];
            /**
             * Tools
             * @description Tools to offer the actor model, in the chat-completions `tools` format: the `recall` tool when the thread has `retrieval` on (answer its calls with POST /v1/threads/{id}/recall), and `updateWorkingMemory` when the actor manages its working memory (send its arguments to PUT /v1/threads/{id}/working-memory), else empty
             */
            tools?: {
                [key: string]: unknown;
            }[];
        };
        /**
         * TurnMessage
         * @description A new message of a turn: `text` for the common case, or `parts` (chat SDK parts) for anything else.
         *
         *     `id` makes a retried request safe (a message already stored is not stored again); without it the server
         *     assigns a random id.
         */
        TurnMessage: {
            /** Id */
            id?: string | null;
            /**
             * Role
             * @enum {string}
             */
            role: "user" | "assistant" | "system" | "tool";
            /** Text */
            text?: string | null;
            /** Parts */
            parts?: components["schemas"]["Part"][] | null;
            /** Created At */
            created_at?: string | null;
            /**
             * Name
             * @description Who wrote the message, when several people share the thread (like OpenAI's message `name`): 1-64 letters, digits, _ . ' - or inner spaces. Stored as the message's `metadata.name`; the Observer attributes what this person said to them by name.
             */
            name?: string | null;
            /** Metadata */
            metadata?: {
                [key: string]: unknown;
            };
        } & ({
            text: string;
            parts?: null;
        } | {
            parts: unknown[];
            text?: null;
        });
        /** TurnRequest */
        TurnRequest: {
            /**
             * Resource Id
             * @description The user or entity the thread belongs to; defaults to the thread id
             */
            resource_id?: string | null;
            /**
             * Messages
             * @description New messages of this turn
             */
            messages?: components["schemas"]["TurnMessage"][];
            /**
             * Actor Model
             * @description The chat model answering this turn (`provider/model`)
             */
            actor_model?: string | null;
            /**
             * Step Number
             * @default 0
             */
            step_number: number;
            /**
             * Turn End
             * @description Whether the turn is finished; defaults to 'the last message is the reply'
             */
            turn_end?: boolean | null;
            /**
             * Context
             * @description What to answer with: `openai` (the context as chat-completions messages), `messages` (as stored messages), `full` (both), or `none` (no context: `context` is null, for a call whose answer the caller will not send to its model, such as posting the assistant's reply); with one form the other list is empty. Omitted: `none` for a call that ends the turn (`turn_end`, by default when the last message is the assistant's), else `openai`. Status, events and blocking are the same in every form
             */
            context?: ("full" | "messages" | "openai" | "none") | null;
            /**
             * Actor Provider Options
             * @description The provider options of the actor's call, by provider, as sent to it (`{"anthropic": {"cacheControl": {"type": "ephemeral", "ttl": "1h"}}}`, `{"openai": {"promptCacheRetention": "24h"}}`): `activateAfterIdle: "auto"` reads them to know how long the actor's prompt cache stays warm
             */
            actor_provider_options?: {
                [key: string]: {
                    [key: string]: unknown;
                };
            } | null;
            /**
             * Memory Options
             * @description The Observer's and Reflector's models (and extractors) for the background work this turn starts, over the thread's config: `{"model": ...}` for both, or `{"observation": {"model": ..., "extract": [...]}, "reflection": {"model": ...}}`. Only models matching the server's OM_REQUEST_MODELS (and OM_MEMORY_MODELS), and extractors only with OM_REQUEST_EXTRACTORS; anything else is refused with 422 naming the field
             */
            memory_options?: {
                model?: unknown;
                observation?: {
                    model?: unknown;
                    extract?: Record<string, never>[];
                };
                reflection?: {
                    model?: unknown;
                    extract?: Record<string, never>[];
                };
            } | null;
        };
        /** TurnResponse */
        TurnResponse: {
            /** Thread Id */
            thread_id: string;
            /** Resource Id */
            resource_id: string;
            /** Record Id */
            record_id: string;
            /** @description The actor's context; null when asked for `none` */
            context: components["schemas"]["TurnContext"] | null;
            status: components["schemas"]["StatusPayload"];
            /** Events */
            events: components["schemas"]["OMEvent"][];
            /**
             * Blocked
             * @description The turn waited for a synchronous observation or reflection
             */
            blocked: boolean;
            /**
             * Degraded
             * @description The wait failed or passed its deadline: the context is uncompressed
             */
            degraded: boolean;
            /** Degraded Reason */
            degraded_reason?: string | null;
        };
        /**
         * WebhookAttempt
         * @description One attempt to deliver one event.
         */
        WebhookAttempt: {
            /** Id */
            id: number;
            /** Event Id */
            event_id: number;
            /** Event Type */
            event_type: string;
            /** Thread Id */
            thread_id: string | null;
            /**
             * Attempt
             * @description 1 for the first attempt of this event, 2 for its first retry, ...
             */
            attempt: number;
            /**
             * Outcome
             * @enum {string}
             */
            outcome: "delivered" | "failed";
            /** Status Code */
            status_code: number | null;
            /** Error */
            error: string | null;
            /** Duration Ms */
            duration_ms: number;
            /**
             * Created At
             * Format: date-time
             */
            created_at: string;
        };
        /**
         * WebhookCreate
         * @description A webhook endpoint: where to POST the caller's events, and which ones.
         */
        WebhookCreate: {
            /**
             * Url
             * @description http(s) URL the events are POSTed to
             */
            url: string;
            /**
             * Events
             * @description Event types to receive, or ["*"] for every event
             */
            events: string[];
            /** Description */
            description?: string | null;
        };
        /** WebhookCreated */
        WebhookCreated: {
            /** Id */
            id: string;
            /** Url */
            url: string;
            /** Events */
            events: string[];
            /** Description */
            description: string | null;
            /** Enabled */
            enabled: boolean;
            /**
             * State
             * @enum {string}
             */
            state: "active" | "failing" | "dead";
            /**
             * Failures
             * @description Consecutive failed attempts of the event waiting to be delivered
             */
            failures: number;
            /** Next Attempt At */
            next_attempt_at: string | null;
            /** Last Error */
            last_error: string | null;
            /** Last Delivered At */
            last_delivered_at: string | null;
            /** Delivered Total */
            delivered_total: number;
            /**
             * Failed Total
             * @description Failed attempts since the endpoint was registered
             */
            failed_total: number;
            /**
             * Created At
             * Format: date-time
             */
            created_at: string;
            /**
             * Updated At
             * Format: date-time
             */
            updated_at: string;
            /**
             * Legacy Signature
             * @description The deprecated OM-Signature header is sent too (endpoints registered before Standard Webhooks signing)
             * @default false
             */
            legacy_signature: boolean;
            /**
             * Previous Secret Expires At
             * @description While a rotated-out secret still signs deliveries: until when; null: one secret
             */
            previous_secret_expires_at?: string | null;
            /**
             * Secret
             * @description The signing secret (whsec_<base64>: the Standard Webhooks key of the webhook-signature header); shown only here
             */
            secret: string;
        };
        /**
         * WebhookDeliveries
         * @description The endpoint's state and its last attempts, newest first (the last 200 are kept). `pending` counts
         *     the events past the cursor (up to 10 000), whether subscribed or not.
         */
        WebhookDeliveries: {
            /** Items */
            items: components["schemas"]["WebhookAttempt"][];
            /**
             * Next Cursor
             * @description Pass as `cursor` for the next page; null on the last page
             */
            next_cursor?: string | null;
            /** Endpoint Id */
            endpoint_id: string;
            /**
             * State
             * @enum {string}
             */
            state: "active" | "failing" | "dead";
            /** Pending */
            pending: number;
            /** Failures */
            failures: number;
            /** Next Attempt At */
            next_attempt_at: string | null;
            /** Last Error */
            last_error: string | null;
        };
        /**
         * WebhookInfo
         * @description An endpoint and its delivery state: `state` is `active`, `failing` (retrying with backoff: see
         *     `failures`, `next_attempt_at`, `last_error`) or `dead` (stopped after too many failures; PATCH
         *     `enabled: true` to retry).
         */
        WebhookInfo: {
            /** Id */
            id: string;
            /** Url */
            url: string;
            /** Events */
            events: string[];
            /** Description */
            description: string | null;
            /** Enabled */
            enabled: boolean;
            /**
             * State
             * @enum {string}
             */
            state: "active" | "failing" | "dead";
            /**
             * Failures
             * @description Consecutive failed attempts of the event waiting to be delivered
             */
            failures: number;
            /** Next Attempt At */
            next_attempt_at: string | null;
            /** Last Error */
            last_error: string | null;
            /** Last Delivered At */
            last_delivered_at: string | null;
            /** Delivered Total */
            delivered_total: number;
            /**
             * Failed Total
             * @description Failed attempts since the endpoint was registered
             */
            failed_total: number;
            /**
             * Created At
             * Format: date-time
             */
            created_at: string;
            /**
             * Updated At
             * Format: date-time
             */
            updated_at: string;
            /**
             * Legacy Signature
             * @description The deprecated OM-Signature header is sent too (endpoints registered before Standard Webhooks signing)
             * @default false
             */
            legacy_signature: boolean;
            /**
             * Previous Secret Expires At
             * @description While a rotated-out secret still signs deliveries: until when; null: one secret
             */
            previous_secret_expires_at?: string | null;
        };
        /**
         * WebhookPatch
         * @description Fields to change; a field left out is kept. `enabled: true` also revives a dead endpoint.
         */
        WebhookPatch: {
            /** Url */
            url?: string;
            /** Events */
            events?: string[];
            /** Description */
            description?: string | null;
            /** Enabled */
            enabled?: boolean;
            /**
             * Legacy Signature
             * @description Also send the deprecated OM-Signature header (false once the receiver verifies the Standard Webhooks headers)
             */
            legacy_signature?: boolean;
        };
        /**
         * WebhookRotate
         * @description How long the secret being replaced keeps signing deliveries beside the new one.
         */
        WebhookRotate: {
            /**
             * Keep Previous S
             * @description Seconds the previous secret stays valid (0: not at all; at most 7 days; default 1 day)
             * @default 86400
             */
            keep_previous_s: number;
        };
        /**
         * WhoAmI
         * @description Who the caller is to this server: what the dashboard asks before it shows a sign-in form.
         */
        WhoAmI: {
            /**
             * Auth
             * @description `key`: requests carry an API key; `none`: authentication is off (om up), no sign-in
             * @enum {string}
             */
            auth: "key" | "none";
            /**
             * Tenant Id
             * @description The key's tenant; null when authentication is off
             */
            tenant_id: string | null;
            /**
             * Flower Url
             * @description Where the operator's Flower is (OM_FLOWER_URL); null: none
             */
            flower_url: string | null;
        };
        /** WorkerSeen */
        WorkerSeen: {
            /**
             * Name
             * @description The worker's Celery hostname
             */
            name: string;
            /**
             * Queues
             * @description The queues it consumes
             */
            queues: string[];
        };
        /**
         * WorkingMemoryPut
         * @description A new working memory, whole (it replaces what is stored).
         */
        WorkingMemoryPut: {
            /**
             * Content
             * @description Markdown text; in schema mode the JSON object (or its JSON text), valid against workingMemory.schema
             */
            content: string | {
                [key: string]: unknown;
            };
            /**
             * Expectedversion
             * @description The version you read (0: never written); the write is refused with 409 when the memory is at another version. Leave out to write whatever is stored
             */
            expectedVersion?: number | null;
        };
        /** WorkingMemoryResponse */
        WorkingMemoryResponse: {
            /**
             * Scope
             * @enum {string}
             */
            scope: "thread" | "resource";
            /**
             * Format
             * @enum {string}
             */
            format: "markdown" | "json";
            /**
             * Content
             * @description The memory: Markdown text, or the JSON object in schema mode; the template (or {}) before the first write
             */
            content: string | {
                [key: string]: unknown;
            };
            /**
             * Version
             * @description Counts writes; 0 before the first
             */
            version: number;
            /** Updated At */
            updated_at: string | null;
            /** Updated By */
            updated_by: ("api" | "observer" | "actor") | null;
            /**
             * Thread Id
             * @description The thread whose memory this is (thread scope), else null
             */
            thread_id: string | null;
            /** Resource Id */
            resource_id: string;
        };
    };
    responses: never;
    parameters: never;
    requestBodies: never;
    headers: never;
    pathItems: never;
}
export type $defs = Record<string, never>;
export interface operations {
    post_turn_v1_threads__thread_id__turns_post: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The conversation's id */
                thread_id: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["TurnRequest"];
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["TurnResponse"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The request conflicts with what is stored */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A message or the body is over a limit */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    get_status_v1_threads__thread_id__status_get: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The conversation's id */
                thread_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["StatusPayload"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    get_observations_v1_threads__thread_id__observations_get: {
        parameters: {
            query?: {
                /** @description Past generations to return */
                history_limit?: number;
                history_offset?: number;
            };
            header?: never;
            path: {
                /** @description The conversation's id */
                thread_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ObservationsResponse"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    get_messages_v1_threads__thread_id__messages_get: {
        parameters: {
            query?: {
                /** @description Items per page */
                limit?: number;
                /** @description The previous page's next_cursor; leave out for the first page */
                cursor?: string | null;
                /** @description next_before_seq of a page (older callers; use cursor) */
                before_seq?: number | null;
            };
            header?: never;
            path: {
                /** @description The conversation's id */
                thread_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["MessagesResponse"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    post_observe_v1_threads__thread_id__observe_post: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The conversation's id */
                thread_id: string;
            };
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/json": components["schemas"]["ObserveRequest"] | null;
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["OperationResponse"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The request conflicts with what is stored */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    post_reflect_v1_threads__thread_id__reflect_post: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The conversation's id */
                thread_id: string;
            };
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/json": components["schemas"]["ReflectRequest"] | null;
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["OperationResponse"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The request conflicts with what is stored */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    get_config_v1_threads__thread_id__config_get: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The conversation's id */
                thread_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ConfigResponse"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    put_config_v1_threads__thread_id__config_put: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The conversation's id */
                thread_id: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["ConfigRequest"];
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ConfigResponse"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The request conflicts with what is stored */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    get_thread_v1_threads__thread_id__get: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The conversation's id */
                thread_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ThreadDetail"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    delete_thread_v1_threads__thread_id__delete: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The conversation's id */
                thread_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    patch_thread_v1_threads__thread_id__patch: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The conversation's id */
                thread_id: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["ThreadPatch"];
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ThreadDetail"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    post_recall_v1_threads__thread_id__recall_post: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The conversation's id */
                thread_id: string;
            };
            cookie?: never;
        };
        /** @description The recall tool call's arguments, as the model wrote them */
        requestBody?: {
            content: {
                "application/json": {
                    /**
                     * @description "messages" (default) reads raw messages of a conversation page by page; "threads" lists the conversations you can read; "search" finds matching memories and messages by meaning (only when search is enabled).
                     * @enum {string}
                     */
                    mode?: "messages" | "threads" | "search";
                    /** @description What to look for; required with mode "search". */
                    query?: string;
                    /** @description Id of the message to read around: one end of an observation group's range (for _range: `a:b`_ pass "a" or "b", never the whole range) or an id shown in [brackets] by an earlier recall. */
                    cursor?: string;
                    /** @description Read another conversation (ids come from mode "threads"); "current" is this one. Without a cursor, reading starts at that conversation's beginning. */
                    threadId?: string;
                    /**
                     * @description Without a cursor: page from the oldest ("start", default) or the newest ("end") message.
                     * @enum {string}
                     */
                    anchor?: "start" | "end";
                    /** @description Messages: 1 (default) is the page right after the cursor, 2 the one after it; -1 is the page right before the cursor. Threads: 0-based page number. */
                    page?: number;
                    /** @description Items per page: messages and search at most 20 (defaults 20 and 10), threads up to 50 (default 20). */
                    limit?: number;
                    /**
                     * @description "low" (default) shows every part shortened, with [pN] part numbers; "high" shows one part in full, with tool arguments and results, and says how to get the next one.
                     * @enum {string}
                     */
                    detail?: "low" | "high";
                    /**
                     * @description Messages mode: show only parts of this kind.
                     * @enum {string}
                     */
                    partType?: "text" | "tool-call" | "tool-result" | "reasoning" | "image" | "file";
                    /** @description Messages mode: show only calls and results of this tool. */
                    toolName?: string;
                    /** @description With a cursor: return part N ([pN]) of that message in full. */
                    partIndex?: number;
                    /** @description With partIndex: start reading the part at this character; pass the nextCharOffset of a truncated answer to read on. */
                    charOffset?: number;
                    /** @description ISO-8601 date or time (2026-03-15, 2026-03-10T00:00:00Z). Threads: only conversations started before it. Search: only what was observed or written before it. */
                    before?: string;
                    /** @description Like before, for things after the given date or time. */
                    after?: string;
                } | {
                    [key: string]: unknown;
                } | null;
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["RecallResponse"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The request conflicts with what is stored */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    get_events_v1_threads__thread_id__events_get: {
        parameters: {
            query?: {
                /** @description The same resume cursor, for clients that cannot set the header */
                after?: string | null;
                /** @description Keep the stream open for live events */
                follow?: boolean;
            };
            header?: {
                /** @description Resume cursor: the `id:` of the last message received (an event id also works) */
                "Last-Event-ID"?: string | null;
            };
            path: {
                /** @description The conversation's id */
                thread_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description text/event-stream: each message has `id:` (a resume cursor for Last-Event-ID) and `data:` a JSON part `{id, type, data}`: the outbox id, a data-om-* type and its spec payload */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "text/event-stream": string;
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many event streams open for this API key (OM_SSE_MAX_STREAMS_PER_KEY) or on this server (OM_SSE_MAX_STREAMS), or over this tenant's request rate; `Retry-After` says when to try again */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    list_resources_v1_resources_get: {
        parameters: {
            query?: {
                /** @description Items per page */
                limit?: number;
                /** @description The previous page's next_cursor; leave out for the first page */
                cursor?: string | null;
                /** @description Only resources whose id contains this text (any case) */
                q?: string | null;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Page_ResourceSummary_"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    get_threads_v1_resources__resource_id__threads_get: {
        parameters: {
            query?: {
                /** @description Items per page */
                limit?: number;
                /** @description The previous page's next_cursor; leave out for the first page */
                cursor?: string | null;
            };
            header?: never;
            path: {
                /** @description The user or entity's id */
                resource_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ThreadsResponse"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    get_resource_config_v1_resources__resource_id__config_get: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The user or entity's id */
                resource_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ResourceConfigResponse"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    put_resource_config_v1_resources__resource_id__config_put: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The user or entity's id */
                resource_id: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["ResourceConfigRequest"];
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ResourceConfigResponse"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    delete_resource_v1_resources__resource_id__delete: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The user or entity's id */
                resource_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    search_resource_v1_resources__resource_id__search_post: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The user or entity's id */
                resource_id: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["SearchBody"];
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SearchResponse"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The request conflicts with what is stored */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    search_thread_v1_threads__thread_id__search_post: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The conversation's id */
                thread_id: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["ThreadSearchBody"];
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SearchResponse"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The request conflicts with what is stored */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    list_threads_v1_threads_get: {
        parameters: {
            query?: {
                /** @description Items per page */
                limit?: number;
                /** @description The previous page's next_cursor; leave out for the first page */
                cursor?: string | null;
                /** @description Only the threads of this resource (oldest first) */
                resource_id?: string | null;
                /** @description Only threads whose id or title contains this text (any case) */
                q?: string | null;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Page_ThreadInfo_"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    delete_observation_line_v1_threads__thread_id__observations__line__delete: {
        parameters: {
            query: {
                /** @description SHA-256 (hex) of the line's UTF-8 text as you read it (409 when it changed) */
                expected_sha256: string;
            };
            header?: never;
            path: {
                /** @description The conversation's id */
                thread_id: string;
                /** @description 0-based index of the line in active.observations (split on \n) */
                line: number;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ObservationEditResponse"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The request conflicts with what is stored */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    patch_observation_line_v1_threads__thread_id__observations__line__patch: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The conversation's id */
                thread_id: string;
                /** @description 0-based index of the line in active.observations (split on \n) */
                line: number;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["ObservationLineEdit"];
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ObservationEditResponse"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The request conflicts with what is stored */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    get_thread_memory_v1_threads__thread_id__working_memory_get: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The conversation's id */
                thread_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["WorkingMemoryResponse"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The request conflicts with what is stored */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    put_thread_memory_v1_threads__thread_id__working_memory_put: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The conversation's id */
                thread_id: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["WorkingMemoryPut"];
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["WorkingMemoryResponse"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The request conflicts with what is stored */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    get_resource_memory_v1_resources__resource_id__working_memory_get: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The user or entity's id */
                resource_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["WorkingMemoryResponse"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The request conflicts with what is stored */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    put_resource_memory_v1_resources__resource_id__working_memory_put: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The user or entity's id */
                resource_id: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["WorkingMemoryPut"];
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["WorkingMemoryResponse"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The request conflicts with what is stored */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    list_models_v1_models_get: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ModelList"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    chat_completions_v1_chat_completions_post: {
        parameters: {
            query?: never;
            header?: {
                "X-OM-Thread-Id"?: string | null;
                "X-OM-Resource-Id"?: string | null;
            };
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["ChatCompletionRequest"];
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ChatCompletionResponse"];
                    "text/event-stream": string;
                };
            };
            /** @description The actor model refused the request */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The request conflicts with what is stored */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A message or the body is over a limit */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The actor model failed or cannot be called */
            502: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The actor model did not answer in time */
            504: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    get_usage_v1_usage_get: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["KeyUsageResponse"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    get_spend_v1_usage_spend_get: {
        parameters: {
            query?: {
                /** @description How many UTC days back, today included; more than OM_USAGE_MAX_DAYS are served as OM_USAGE_MAX_DAYS (first_day says which) */
                days?: number;
                /** @description Only this thread's spend */
                thread?: string | null;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SpendResponse"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    list_webhooks_v1_webhooks_get: {
        parameters: {
            query?: {
                /** @description Items per page */
                limit?: number;
                /** @description The previous page's next_cursor; leave out for the first page */
                cursor?: string | null;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Page_WebhookInfo_"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    create_webhook_v1_webhooks_post: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["WebhookCreate"];
            };
        };
        responses: {
            /** @description Successful Response */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["WebhookCreated"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    get_webhook_v1_webhooks__endpoint_id__get: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The webhook's id (wh_...) */
                endpoint_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["WebhookInfo"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    delete_webhook_v1_webhooks__endpoint_id__delete: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The webhook's id (wh_...) */
                endpoint_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    patch_webhook_v1_webhooks__endpoint_id__patch: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The webhook's id (wh_...) */
                endpoint_id: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["WebhookPatch"];
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["WebhookInfo"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    rotate_secret_v1_webhooks__endpoint_id__rotate_secret_post: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The webhook's id (wh_...) */
                endpoint_id: string;
            };
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/json": components["schemas"]["WebhookRotate"] | null;
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["WebhookCreated"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    drop_previous_secret_v1_webhooks__endpoint_id__previous_secret_delete: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The webhook's id (wh_...) */
                endpoint_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["WebhookInfo"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    list_deliveries_v1_webhooks__endpoint_id__deliveries_get: {
        parameters: {
            query?: {
                /** @description Items per page */
                limit?: number;
                /** @description The previous page's next_cursor; leave out for the first page */
                cursor?: string | null;
            };
            header?: never;
            path: {
                /** @description The webhook's id (wh_...) */
                endpoint_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["WebhookDeliveries"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    export_thread_v1_threads__thread_id__export_get: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The conversation's id */
                thread_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The memory as JSON Lines */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/x-ndjson": string;
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    export_resource_v1_resources__resource_id__export_get: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The user or entity's id */
                resource_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The memory as JSON Lines */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/x-ndjson": string;
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    import_file_v1_import_post: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/x-ndjson": string;
                "text/plain": string;
            };
        };
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ImportResponse"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The request conflicts with what is stored */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A message or the body is over a limit */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    whoami_v1_whoami_get: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["WhoAmI"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    fleet_v1_fleet_get: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["FleetResponse"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    generation_diff_v1_threads__thread_id__generations__generation__diff_get: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The conversation's id */
                thread_id: string;
                /** @description The generation's number (`generation_count`) */
                generation: number;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["GenerationDiffResponse"];
                };
            };
            /** @description Missing or unknown API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Unknown thread (or another tenant's) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description A field is invalid; `error.field` names it */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description Too many requests: over this tenant's request rate (`Retry-After` says when to retry), or, through the proxy, the actor model's rate limit */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description The database or the broker is unreachable; retry with the same message ids */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
    healthz_healthz_get: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["HealthResponse"];
                };
            };
        };
    };
    readyz_readyz_get: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ReadinessResponse"];
                };
            };
            /** @description A dependency is down */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ReadinessResponse"];
                };
            };
        };
    };
    metrics_metrics_get: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Successful Response */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "text/plain": string;
                };
            };
            /** @description The scrape token (OM_METRICS_TOKEN) is missing or wrong */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
            /** @description No scrape token is configured: metrics are not served on the API port */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorResponse"];
                };
            };
        };
    };
}
