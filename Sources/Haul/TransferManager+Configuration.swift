import Foundation

extension TransferManager {
    /// How a manager runs its transfers. Every default is documented with its reason.
    public struct Configuration: Sendable {
        /// How many transfers run at once, over all hosts. Default 4, as DownloadManager's
        /// `maxConcurrentDownloads`: enough to hide latency on small files without starving one large file.
        ///
        /// Both limits count transfers using the network: a download whose body has arrived gives up its slots
        /// while it records and renames its file, so the next transfer's request goes out meanwhile.
        public var maximumConcurrentTransfers: Int = 4
        /// How many transfers run at once against one host (scheme, host and port). Default 6, the per-host
        /// connection limit of browsers, which servers are tuned to accept.
        public var maximumTransfersPerHost: Int = 6
        /// How often progress is reported, at most, per transfer and per batch. Default 100 ms: smooth for a
        /// progress bar, cheap for thousands of files. The last progress of a transfer is always reported.
        public var progressInterval: Duration = .milliseconds(100)
        /// How long events may wait so that they reach the event streams (``Batch/events(_:)``,
        /// ``TransferManager/events()``) together. Default 10 ms: below what a person or a progress bar notices, and each
        /// event handed over alone wakes the task reading its stream. A batch's last events and its `finished` event are
        /// handed over at once. Zero hands every event over as it happens.
        public var eventDeliveryInterval: Duration = .milliseconds(10)
        /// How files downloaded into a folder are named, unless a request says otherwise. Default: the URL's last
        /// path component, as curl `-O` and wget do.
        public var naming: NamingPolicy = .urlPath
        /// What happens when a final path exists, unless a request says otherwise. Default: publish under
        /// `name.1.ext`, as browsers do; nothing is overwritten unless asked.
        public var conflictPolicy: ConflictPolicy = .rename
        /// How long connecting may take. Default 10 s, AsyncHTTPClient's own default.
        public var connectTimeout: Duration = .seconds(10)
        /// How long a response may stay silent (no header or body byte) before the attempt fails. Default 60 s, as
        /// wget's `--read-timeout` is 900 s and curl has none: long enough for slow servers, short enough to notice a
        /// dead connection that never closes. The clock runs from the last read from the socket, so a consumer that
        /// stops reading (a disk stalled for that long) counts as silence too.
        public var idleTimeout: Duration = .seconds(60)
        /// How many redirects one request may follow. Default 10, as curl's `--max-redirs` default is 50 and
        /// browsers stop near 20: 10 covers every CDN chain seen in practice. Only http and https targets are
        /// followed; a loop fails at once.
        public var maximumRedirects: Int = 10
        /// Whether files are forced to stable storage (`fsync`) before they are published. Default `false`: a killed
        /// process loses nothing either way (the kernel keeps written pages); only a power loss does, and `fsync`
        /// per file costs much on batches of small files.
        public var synchronizesFiles: Bool = false
        /// A floor under the receiving speed of one transfer: an attempt that receives fewer than `bytesPerSecond`
        /// over any `duration` fails with ``HaulError/Code/timedOut`` (and is retried, resuming). Default `nil`: off,
        /// as in curl (`--speed-limit`/`--speed-time`) and aria2c (`--lowest-speed-limit`), because a slow link is
        /// not a broken one.
        public var lowSpeedLimit: LowSpeedLimit? = nil
        /// A limit on the bytes per second received over all transfers, enforced smoothly (a token bucket);
        /// `nil` for none (the default, as every peer has). Change it while running with
        /// ``TransferManager/setBandwidthLimit(_:)``.
        public var bandwidthLimit: Int64? = nil
        /// When failed transfers are tried again; see ``RetryPolicy`` for the defaults and their reasons.
        public var retryPolicy = RetryPolicy()
        /// The largest file accepted, in bytes; a larger one fails with ``HaulError/Code/fileTooLarge`` before or
        /// while it downloads. Default `nil`: no limit, as curl and wget have none by default.
        public var maximumFileSize: Int64? = nil
        /// Request headers (lower-case names) that never follow a redirect to another origin (scheme, host, port).
        /// Default: `authorization`, `cookie`, `proxy-authorization`, as browsers and curl drop them.
        public var secretHeaderNames: Set<String> = ["authorization", "cookie", "proxy-authorization"]
        /// Hosts (lower-case) that secret headers may follow redirects to. Default: none.
        public var trustedRedirectHosts: Set<String> = []
        /// Whether a redirect from https to http is followed. Default `false`: a downgrade would expose the request
        /// and the file to the network.
        public var allowsInsecureRedirects: Bool = false
        /// Files of PEM certificates trusted for https besides the system's: a private certificate authority, a
        /// self-signed server (wget2's and aria2c's `--ca-certificate`). Read when the manager starts; a file that
        /// holds no certificate fails it with ``HaulError/Code/invalidRequest``. Default: none.
        public var additionalTrustedCertificates: [URL] = []
        /// Whether https servers' certificates are verified: signed by a trusted authority, for the host asked, in
        /// date. Default `true`. Turned off (curl's `--insecure`), anyone between Haul and the server can read and
        /// change the files: for test servers only.
        public var verifiesCertificates: Bool = true
        /// A user and password per host, sent as `Authorization: Basic` to that host only, on each request and
        /// redirect that reaches it (``HostCredentials/init(netrc:)`` reads a netrc file). Default: none.
        public var hostCredentials = HostCredentials()
        /// The cookies sent with the requests whose URLs they match, on each request and redirect, and, when it
        /// accepts them, kept from the servers' `Set-Cookie` fields for the later requests (read it after the run
        /// to save them). ``CookieJar/init(netscape:now:)`` reads a cookie file. Default `nil`: no cookies are sent
        /// or kept.
        public var cookies: CookieStorage? = nil
        /// The HTTP proxies requests go through, and the hosts reached directly. Default: none, every request goes
        /// directly (the library reads no environment; ``ProxySettings/init(environment:)`` reads what curl reads,
        /// as the `haul` command does). Plain-http downloads send the whole URL to the proxy; https requests, and
        /// plain-http uploads and deletions, go through a `CONNECT` tunnel.
        public var proxies = ProxySettings()
        /// Where batches and transfers are recorded, so that they survive the process; `nil` records nothing.
        /// With a store, a manager's scope that ends stops its transfers and keeps their partial files, and a
        /// request for a transfer the store knows resumes its partial file, or is not fetched at all if its file
        /// completed and is unchanged. Default `nil`: the library never writes outside the destination unasked.
        public var store: TransferStore? = nil
        /// Whether a new file of known length up to 1 MiB is written without a name (Linux's `O_TMPFILE`) and named once,
        /// when published, rather than under its `.part` name and then renamed: one change to the folder per file instead of
        /// two. A killed process loses such a file's bytes, at most 1 MiB each; an attempt that ends otherwise leaves them
        /// under the `.part` name for its retry. Elsewhere than Linux, and where the file system cannot, the `.part`
        /// file is used.
        ///
        /// Default `nil`: only without a store. With one, each file stays open until its completion is committed, which can
        /// take the process past 64 descriptors; Linux then grows the process's table of descriptors, stopping the thread
        /// for an RCU grace period. A program that grew its table first (``TransferManager/reserveFileDescriptors(_:)``)
        /// sets `true`, as the `haul` command does.
        public var writesSmallFilesUnnamed: Bool? = nil
        /// Hooks around each attempt (HWIFileDownload's delegate methods); none by default.
        public var hooks = Hooks()
        /// The `User-Agent` sent with every request, unless a request's headers set one.
        public var userAgent: String = "Haul/0.1"
        /// With a store, how long a file's completion record waits for those of other files finishing meanwhile, to
        /// share a transaction, while other transfers are on the network (see ``StoreWriter/publishingLinger``).
        package var publishingLinger: Duration = StoreWriter.publishingLinger

        /// The defaults.
        public init() {}
    }

    /// A minimum speed held over a duration; see ``Configuration/lowSpeedLimit``.
    public struct LowSpeedLimit: Sendable, Hashable {
        /// The slowest acceptable average speed.
        public var bytesPerSecond: Int64
        /// How long the speed must stay below the floor before the attempt fails.
        public var duration: Duration

        /// Creates a limit.
        public init(bytesPerSecond: Int64, duration: Duration) {
            self.bytesPerSecond = bytesPerSecond
            self.duration = duration
        }
    }

    /// Decisions a caller can take around each attempt. Each is optional; without it Haul's own rule applies.
    ///
    /// A hook runs on its transfer's task, which runs on one of the HTTP client's event loops beside the other
    /// transfers' I/O: keep it short, and await slow work elsewhere (on an actor of your own) rather than block.
    public struct Hooks: Sendable {
        /// Called before every attempt, the first included, with the identifier, the attempt's number (from 1) and
        /// the request's URL and headers; returns the URL and headers to use. For signed URLs that expire, tokens
        /// that must be refreshed: a retry or a resume after a pause asks again.
        public var prepareRequest:
            (
                @Sendable (TransferID, Int, URL, [(name: String, value: String)]) async -> (
                    url: URL, headers: [(name: String, value: String)]
                )
            )?
        /// Whether a successful (2xx) status is acceptable for a transfer; `false` fails it with
        /// ``HaulError/Code/httpStatus`` before any byte is written. Other statuses follow Haul's rules.
        public var acceptsStatus: (@Sendable (TransferID, Int) -> Bool)?
        /// Checks a complete file before it is published, given the partial file's path; `false` fails the transfer
        /// with ``HaulError/Code/validationFailed`` and removes the file, so nothing reaches the final path.
        public var validatesFile: (@Sendable (TransferID, URL) -> Bool)?

        /// No hooks.
        public init() {}
    }
}
