import NIOSSL

/// A certificate authority made for Haul's tests and a server certificate it signed, for 127.0.0.1, 127.0.0.2 and
/// `localhost`, valid until 2126 (made once with `openssl req -x509 -newkey ec` on P-256; the authority's own key was
/// thrown away). Trust ``authority`` and the test server's https is valid; trust nothing and it is not. Test material
/// only: the key is public.
public enum TestCertificates {
    /// The authority's certificate, in PEM: what a client trusts.
    public static let authority = """
        -----BEGIN CERTIFICATE-----
        MIIBlTCCATugAwIBAgIUUtsoOzdRr+SLFEXlA+UmguO8FYUwCgYIKoZIzj0EAwIw
        FzEVMBMGA1UEAwwMSGF1bCBUZXN0IENBMCAXDTI2MTEyNzA1NTkzM1oYDzIxMjYx
        MTAzMDU1OTMzWjAXMRUwEwYDVQQDDAxIYXVsIFRlc3QgQ0EwWTATBgcqhkjOPQIB
        BggqhkjOPQMBBwNCAAQrv1xj5XXZ5YUOyqX+wIJ2qkCmnDEisPNOxUdHZsTzYaa3
        EbQimW3GwUaOjMCzViPxzE3VMFwyCg0RyXwMekp5o2MwYTAdBgNVHQ4EFgQU+dux
        7O8LSrQz/BSZTFG1It0RMtIwHwYDVR0jBBgwFoAU+dux7O8LSrQz/BSZTFG1It0R
        MtIwDwYDVR0TAQH/BAUwAwEB/zAOBgNVHQ8BAf8EBAMCAQYwCgYIKoZIzj0EAwID
        SAAwRQIgAIM3FZCKiprnFdGc20CK54w+TCN7NxPJaSj6dgLwOqYCIQDNA7kOcAYK
        eG4C2aMqdeVJHUm0clEvdMuKMxAFSCd/dg==
        -----END CERTIFICATE-----
        """

    /// The server's certificate, in PEM.
    public static let server = """
        -----BEGIN CERTIFICATE-----
        MIIBxDCCAWugAwIBAgIUXIIMDwG4eIkRfOZx8XXti+FEk9kwCgYIKoZIzj0EAwIw
        FzEVMBMGA1UEAwwMSGF1bCBUZXN0IENBMCAXDTI2MTEyNzA1NTkzM1oYDzIxMjYx
        MTAzMDU1OTMzWjAUMRIwEAYDVQQDDAlsb2NhbGhvc3QwWTATBgcqhkjOPQIBBggq
        hkjOPQMBBwNCAAR+HctDp6rlSQaEIgb96swIHRQdXM1ooXtDiYlw6Ng+6+nh0+jA
        OQhYc6ecLbShYVmFrSNNNb3HUp120NeXlNZSo4GVMIGSMCAGA1UdEQQZMBeHBH8A
        AAGHBH8AAAKCCWxvY2FsaG9zdDAJBgNVHRMEAjAAMA4GA1UdDwEB/wQEAwIHgDAT
        BgNVHSUEDDAKBggrBgEFBQcDATAdBgNVHQ4EFgQUgWsa7OFU4zzj+ZasUccobRkr
        xRkwHwYDVR0jBBgwFoAU+dux7O8LSrQz/BSZTFG1It0RMtIwCgYIKoZIzj0EAwID
        RwAwRAIgKB8DZFGWaXyKkbrOqOU4A1t3EhitAkfCTEJofH0n41UCIDZ1zNXIYIE4
        OF7mniEBJrtxlyxnpBq4oED3KgpwkRh2
        -----END CERTIFICATE-----
        """

    /// The server's private key (PKCS #8), in PEM.
    public static let serverKey = """
        -----BEGIN PRIVATE KEY-----
        MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgXOCLx/Sd9znk1NIp
        DqaeemzbfDHLeO/eLJxtB+KHyeihRANCAAR+HctDp6rlSQaEIgb96swIHRQdXM1o
        oXtDiYlw6Ng+6+nh0+jAOQhYc6ecLbShYVmFrSNNNb3HUp120NeXlNZS
        -----END PRIVATE KEY-----
        """

    /// A server's TLS configuration with the certificate and key above.
    static func serverConfiguration() throws -> TLSConfiguration {
        TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMBytes(Array(Self.server.utf8)).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(Self.serverKey.utf8), format: .pem))
        )
    }
}
