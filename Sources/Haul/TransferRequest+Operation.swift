import Foundation

extension TransferRequest {
    /// What a transfer does with its URL: download it (the default), upload to it, or delete it.
    ///
    /// All three share the manager's queue, concurrency limits, retries, pause, resume and cancel, progress, events,
    /// store and batch reports.
    public enum Operation: Sendable, Hashable {
        /// `GET` the URL into the request's ``TransferRequest/destination``.
        case download
        /// Send a local file or in-memory data to the URL.
        case upload(Upload)
        /// `DELETE` the URL.
        case delete(Deletion)
    }

    /// What an upload sends, and how.
    public struct Upload: Sendable, Hashable {
        /// Where the bytes come from.
        public enum Source: Sendable, Hashable {
            /// A local file, streamed from disk in 256 KiB reads (constant memory whatever its size).
            case file(URL)
            /// Bytes in memory (an app's generated image, say). The bytes are not kept in the store, so a later
            /// process cannot continue such an upload: ``TransferManager/resumeStoredBatch(_:headers:events:)``
            /// leaves it out.
            case data(Data)
        }

        /// The bytes to send.
        public var source: Source
        /// `PUT` the bytes as the body, or `POST` them as a `multipart/form-data` file field.
        public var method: UploadMethod
        /// The `Content-Type` of the bytes; `application/octet-stream` when `nil`.
        public var contentType: String?
        /// The file name sent in a multipart field: the source file's name, or the one given with the data.
        public var fileName: String

        /// Creates an upload.
        public init(source: Source, method: UploadMethod = .put, contentType: String? = nil, fileName: String) {
            self.source = source
            self.method = method
            self.contentType = contentType
            self.fileName = fileName
        }
    }

    /// How an upload is sent.
    public struct UploadMethod: Sendable, Hashable, CustomStringConvertible {
        private enum Base: Hashable, Sendable {
            case put
            case multipart(field: String)
        }
        private let base: Base

        /// `PUT` with the bytes as the body: WebDAV, S3-style presigned URLs and most object stores (the default).
        public static let put = UploadMethod(base: .put)

        /// `POST` as `multipart/form-data`, the bytes in one file field named `field` (`file` by default), as an
        /// HTML form would send them.
        public static func multipart(field: String = "file") -> UploadMethod {
            UploadMethod(base: .multipart(field: field))
        }

        private init(base: Base) { self.base = base }

        /// The HTTP method: `PUT` or `POST`.
        public var httpMethod: String {
            switch self.base {
            case .put: "PUT"
            case .multipart: "POST"
            }
        }

        /// The multipart field name, for a multipart `POST`; `nil` for `PUT`.
        public var multipartField: String? {
            switch self.base {
            case .put: nil
            case .multipart(let field): field
            }
        }

        /// `PUT`, or `POST multipart/form-data; field=NAME`.
        public var description: String {
            self.multipartField.map { "POST multipart/form-data; field=\($0)" } ?? "PUT"
        }
    }

    /// How a deletion treats the server's answer.
    public struct Deletion: Sendable, Hashable {
        /// Whether a `404 Not Found` counts as success (the file is gone either way, as `rm -f` sees it). By default
        /// it fails the item with ``HaulError/Code/notFound``.
        public var treatsNotFoundAsSuccess: Bool

        /// Creates deletion options.
        public init(treatsNotFoundAsSuccess: Bool = false) {
            self.treatsNotFoundAsSuccess = treatsNotFoundAsSuccess
        }
    }

    /// A request that uploads a local file to `url`, streaming it from disk.
    ///
    /// Its size is read now, so that batch progress is weighted by bytes from the start (SDL-0029's
    /// `numberOfBytes`); a file that is missing now fails when its turn comes, with ``HaulError/Code/fileSystem``.
    ///
    /// - Parameters:
    ///   - file: the local file to send.
    ///   - url: where to send it (`http` or `https`), such as `https://dav.example.com/photos/1.jpg`.
    ///   - method: ``UploadMethod/put`` (the default) or ``UploadMethod/multipart(field:)``.
    ///   - id: an identifier of your choosing; by default one derived from the URL, the method and the file.
    ///   - headers: extra request headers, sent with every attempt.
    ///   - contentType: the body's type; `application/octet-stream` when `nil`.
    public static func upload(
        file: URL,
        to url: URL,
        method: UploadMethod = .put,
        id: TransferID? = nil,
        headers: [(name: String, value: String)] = [],
        contentType: String? = nil
    ) -> TransferRequest {
        let path = file.standardizedFileURL
        let upload = Upload(
            source: .file(path),
            method: method,
            contentType: contentType,
            fileName: path.lastPathComponent
        )
        return TransferRequest(
            url: url,
            destination: .file(path),
            id: id ?? TransferID.derived(url: url.absoluteString, destination: "upload:\(method):\(path.path)"),
            expectedByteCount: Persisted.sizeAndModification(path.path)?.0,
            headers: headers,
            operation: .upload(upload)
        )
    }

    /// A request that uploads bytes in memory to `url`, under the file name `name` (used by multipart uploads).
    public static func upload(
        data: Data,
        named name: String,
        to url: URL,
        method: UploadMethod = .put,
        id: TransferID? = nil,
        headers: [(name: String, value: String)] = [],
        contentType: String? = nil
    ) -> TransferRequest {
        let upload = Upload(source: .data(data), method: method, contentType: contentType, fileName: name)
        return TransferRequest(
            url: url,
            destination: .folder(URL(filePath: "/", directoryHint: .isDirectory)),
            id: id
                ?? TransferID.derived(
                    url: url.absoluteString,
                    destination: "upload-data:\(method):\(name):\(data.count)"
                ),
            expectedByteCount: Int64(data.count),
            headers: headers,
            operation: .upload(upload)
        )
    }

    /// A request that deletes the remote file at `url` with `DELETE`.
    ///
    /// `200`, `202` and `204` succeed; `404` fails the item with ``HaulError/Code/notFound`` unless
    /// `treatsNotFoundAsSuccess`; other statuses fail it with the status, and only transient failures are retried.
    public static func delete(
        _ url: URL,
        id: TransferID? = nil,
        headers: [(name: String, value: String)] = [],
        treatsNotFoundAsSuccess: Bool = false
    ) -> TransferRequest {
        TransferRequest(
            url: url,
            destination: .folder(URL(filePath: "/", directoryHint: .isDirectory)),
            id: id ?? TransferID.derived(url: url.absoluteString, destination: "delete"),
            headers: headers,
            operation: .delete(Deletion(treatsNotFoundAsSuccess: treatsNotFoundAsSuccess))
        )
    }

    /// Whether this request downloads (as opposed to uploading or deleting).
    var isDownload: Bool {
        if case .download = self.operation { true } else { false }
    }
}
