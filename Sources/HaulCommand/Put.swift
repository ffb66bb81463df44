import ArgumentParser
import Foundation
import Haul

struct Put: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "put",
        abstract: "Upload files, several at a time.",
        discussion: """
            Each FILE goes to BASE_URL/NAME, NAME being its file name (percent-encoded): with PUT (WebDAV, presigned \
            URLs, most object stores) or, with --method POST, as a multipart/form-data file field. With the state \
            database, a rerun does not send again the files it already uploaded, unless they changed.

            Exit codes: 0 every file uploaded (or was already uploaded and unchanged); 1 at least one failed or was \
            cancelled; 64 bad usage (a missing file, a folder, two files with one name: nothing was sent); 130 \
            interrupted by SIGINT or SIGTERM.
            """
    )

    @Argument(help: "The files to upload.")
    var files: [String] = []

    @Option(name: .long, help: "The base URL (http or https): each file goes to BASE_URL/NAME.")
    var to: String

    @Option(name: .long, help: "PUT (the default) or POST (multipart/form-data).")
    var method: String = "PUT"

    @Option(name: .long, help: "The multipart field name, with --method POST.")
    var field: String?

    @OptionGroup var options: TransferOptions

    @OptionGroup var state: StateOptions

    func validate() throws {
        guard !self.files.isEmpty else { throw ValidationError("Give at least one file to upload.") }
        guard let base = InputFileParser.parse(self.to), let scheme = base.scheme?.lowercased(),
            scheme == "http" || scheme == "https", base.host?.isEmpty == false
        else {
            throw ValidationError("--to takes an http or https URL, got '\(self.to)'.")
        }
        guard ["PUT", "POST"].contains(self.method.uppercased()) else {
            throw ValidationError("--method must be PUT or POST.")
        }
        if self.field != nil, self.method.uppercased() != "POST" {
            throw ValidationError("--field applies with --method POST.")
        }
        if let field = self.field, field.isEmpty || field.contains(where: { $0 == "\r" || $0 == "\n" }) {
            throw ValidationError("--field takes a non-empty name on one line.")
        }
        var targets: [String: String] = [:]
        for file in self.files {
            guard Self.isReadableRegularFile(file) else {
                var isFolder: ObjCBool = false
                if FileManager.default.fileExists(atPath: file, isDirectory: &isFolder), isFolder.boolValue {
                    throw ValidationError("\(file) is a folder; give the files in it (haul put DIR/* --to ...).")
                }
                throw ValidationError("\(file) is not a readable file.")
            }
            let name = URL(filePath: file).lastPathComponent
            if let other = targets.updateValue(file, forKey: name) {
                throw ValidationError("\(other) and \(file) would both go to \(Self.target(base: base, name: name)).")
            }
        }
    }

    func run() async throws {
        let (base, headers) = URLCredentials.apply(
            to: InputFileParser.parse(self.to)!,
            headers: self.options.parsedHeaders
        )
        let method: TransferRequest.UploadMethod =
            self.method.uppercased() == "POST" ? .multipart(field: self.field ?? "file") : .put
        let requests = self.files.map { file in
            // Absolute, so that the same command run from elsewhere names the same transfers in the state database.
            let path = URL(filePath: file).absoluteURL.standardizedFileURL
            return TransferRequest.upload(
                file: path,
                to: Self.target(base: base, name: path.lastPathComponent),
                method: method,
                headers: headers
            )
        }
        let configuration = self.options.configuration(store: try self.state.openStore())
        try await BatchRunner.run(configuration: configuration, options: self.options) { batch in
            for request in requests { try await batch.add(request) }
        }
    }

    /// `BASE/NAME`, the name percent-encoded as one path segment.
    static func target(base: URL, name: String) -> URL {
        var allowed = CharacterSet.urlPathAllowed
        allowed.remove(charactersIn: "/;?#%")
        let encoded = name.addingPercentEncoding(withAllowedCharacters: allowed) ?? name
        let text = base.absoluteString
        return URL(string: text.hasSuffix("/") ? text + encoded : text + "/" + encoded)!
    }

    /// Whether `path` is a regular file (links followed) that can be opened for reading.
    static func isReadableRegularFile(_ path: String) -> Bool {
        let resolved = URL(filePath: path).resolvingSymlinksInPath().path
        guard FileManager.default.isReadableFile(atPath: resolved),
            let attributes = try? FileManager.default.attributesOfItem(atPath: resolved)
        else { return false }
        return attributes[.type] as? FileAttributeType == .typeRegular
    }
}
